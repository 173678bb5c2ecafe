// The WebSocket (RFC 6455) codec in one include: frames (websocket_frame.h), messages
// (websocket_message.h) and the opening handshake (websocket_handshake.h). All of it is pure:
// no I/O, no logging, no exceptions of its own; the connection code owns sockets and buffers.
#pragma once

#include "common/websocket_frame.h"
#include "common/websocket_handshake.h"
#include "common/websocket_message.h"
