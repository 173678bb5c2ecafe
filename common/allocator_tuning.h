// How the data-plane processes (relayd, otunnel) set up glibc's allocator before their loop runs.
#pragma once

namespace ot::memory {

// Streaming allocates and frees a buffer per TLS write and per socket write (tens of KiB each).
// With glibc's defaults the freed top of the heap is handed back to the kernel as soon as more than
// 128 KiB of it is free, so the next burst faults every page in again: measured as the largest
// single cost of moving data through relayd and otunnel. This keeps up to 8 MiB of free heap
// (memory is still returned beyond that, so idle processes stay small) and serves blocks below
// 4 MiB from the heap instead of fresh mappings. Returns false when the allocator refused (a
// sanitizer's allocator does), which only costs speed.
bool tuneAllocatorForStreaming();

}  // namespace ot::memory
