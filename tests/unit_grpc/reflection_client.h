// A test-side client for gRPC server reflection (grpc.reflection.v1alpha), spoken as grpcurl
// does. Debian's grpc++ ships the reflection service in libgrpc++_reflection but not its generated
// headers; that library registers the messages' descriptors in protobuf's generated pool, so
// requests and answers are built with DynamicMessage and sent through a generic (byte buffer) stub.
// Uses doctest assertions: call it from a test case only.
#pragma once

#include <doctest/doctest.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ot::testing {

namespace pb = google::protobuf;

// Bounds every reflection call, so a broken server fails the test instead of hanging it.
inline constexpr std::chrono::seconds kReflectionTimeout{10};

// Waits for the one operation started with `tag` on a completion queue used one call at a time.
inline bool awaitTag(grpc::CompletionQueue& queue, std::chrono::system_clock::time_point deadline,
                     void* tag) {
  void* got = nullptr;
  bool ok = false;
  const auto status = queue.AsyncNext(&got, &ok, deadline);
  return status == grpc::CompletionQueue::GOT_EVENT && got == tag && ok;
}

// Asks one question per ServerReflectionInfo call and returns the answer's names.
class ReflectionClient {
 public:
  explicit ReflectionClient(std::shared_ptr<grpc::Channel> channel) : stub_(std::move(channel)) {
    requestType_ = pb::DescriptorPool::generated_pool()->FindMessageTypeByName(
        "grpc.reflection.v1alpha.ServerReflectionRequest");
    responseType_ = pb::DescriptorPool::generated_pool()->FindMessageTypeByName(
        "grpc.reflection.v1alpha.ServerReflectionResponse");
    REQUIRE(requestType_ != nullptr);
    REQUIRE(responseType_ != nullptr);
  }

  [[nodiscard]] std::vector<std::string> listServices() {
    auto response = ask("list_services", "*");
    const pb::Message& list = subMessage(*response, "list_services_response");
    std::vector<std::string> names;
    const pb::FieldDescriptor* services = field(list, "service");
    for (int i = 0; i < list.GetReflection()->FieldSize(list, services); ++i) {
      const pb::Message& service = list.GetReflection()->GetRepeatedMessage(list, services, i);
      names.push_back(service.GetReflection()->GetString(service, field(service, "name")));
    }
    return names;
  }

  // The names of the files that define `symbol`, with their dependencies.
  [[nodiscard]] std::vector<std::string> filesContaining(const std::string& symbol) {
    auto response = ask("file_containing_symbol", symbol);
    const pb::Message& files = subMessage(*response, "file_descriptor_response");
    std::vector<std::string> names;
    const pb::FieldDescriptor* protos = field(files, "file_descriptor_proto");
    for (int i = 0; i < files.GetReflection()->FieldSize(files, protos); ++i) {
      pb::FileDescriptorProto file;
      REQUIRE(file.ParseFromString(files.GetReflection()->GetRepeatedString(files, protos, i)));
      names.push_back(file.name());
    }
    return names;
  }

 private:
  static const pb::FieldDescriptor* field(const pb::Message& message, const std::string& name) {
    const pb::FieldDescriptor* found = message.GetDescriptor()->FindFieldByName(name);
    REQUIRE(found != nullptr);
    return found;
  }

  static const pb::Message& subMessage(const pb::Message& message, const std::string& name) {
    const pb::FieldDescriptor* f = field(message, name);
    REQUIRE(message.GetReflection()->HasField(message, f));
    return message.GetReflection()->GetMessage(message, f);
  }

  struct EndCall {
    grpc::ClientContext& context;
    grpc::CompletionQueue& queue;
    ~EndCall() {
      context.TryCancel();
      queue.Shutdown();
      void* tag = nullptr;
      bool ok = false;
      while (queue.Next(&tag, &ok)) {
      }
    }
  };

  // One request on its own ServerReflectionInfo call (a bidi stream), one response back.
  std::unique_ptr<pb::Message> ask(const std::string& requestField, const std::string& value) {
    std::unique_ptr<pb::Message> request(factory_.GetPrototype(requestType_)->New());
    request->GetReflection()->SetString(request.get(), field(*request, requestField), value);
    std::string requestBytes;
    REQUIRE(request->SerializeToString(&requestBytes));

    grpc::ClientContext context;
    const auto deadline = std::chrono::system_clock::now() + kReflectionTimeout;
    context.set_deadline(deadline);
    grpc::CompletionQueue queue;
    auto call = stub_.PrepareCall(
        &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &queue);
    REQUIRE(call != nullptr);
    // Also runs when a REQUIRE below throws: a completion queue must be shut down and drained
    // before it is destroyed, and a pending operation only completes once the call is cancelled.
    const EndCall endCall{context, queue};
    int started = 0, written = 0, read = 0, closed = 0, finished = 0;
    call->StartCall(&started);
    REQUIRE(awaitTag(queue, deadline, &started));
    grpc::Slice slice(requestBytes);
    call->Write(grpc::ByteBuffer(&slice, 1), &written);
    REQUIRE(awaitTag(queue, deadline, &written));
    grpc::ByteBuffer answer;
    call->Read(&answer, &read);
    REQUIRE(awaitTag(queue, deadline, &read));
    call->WritesDone(&closed);
    REQUIRE(awaitTag(queue, deadline, &closed));
    grpc::Status status;
    call->Finish(&status, &finished);
    REQUIRE(awaitTag(queue, deadline, &finished));
    REQUIRE_MESSAGE(status.ok(), status.error_message());

    std::vector<grpc::Slice> slices;
    REQUIRE(answer.Dump(&slices).ok());
    std::string answerBytes;
    for (const auto& s : slices) {
      answerBytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    std::unique_ptr<pb::Message> response(factory_.GetPrototype(responseType_)->New());
    REQUIRE(response->ParseFromString(answerBytes));
    return response;
  }

  grpc::GenericStub stub_;
  pb::DynamicMessageFactory factory_;
  const pb::Descriptor* requestType_ = nullptr;
  const pb::Descriptor* responseType_ = nullptr;
};

}  // namespace ot::testing
