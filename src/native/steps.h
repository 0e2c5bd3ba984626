// An environment's step in a worker, in a fixed binary form: no pickling, no Python between the pipe and LLVM.
// The layouts are those of behavioral_pq/core/_worker.py (STEP_REQUEST, STEP_REPLY), little-endian:
//   message: uint64 payload size, then the payload.
//   request payload: 'S', uint8 op (1 apply, 2 observe), uint8 wants (bit 0 Autophase, bit 1 InstCount), 1 byte
//     padding, uint32 session id; then, for apply, the pipeline text.
//   reply payload: uint8 status (0 ok, 1 bad input, 2 other error), uint8 changed, 6 bytes padding, int64
//     instruction count; then int64 Autophase (56,) and int64 InstCount (len(instcountNames()),), those asked for,
//     in that order. With a status other than 0, the error message follows the 16 bytes instead.
#pragma once

#include <cstdint>
#include <string>

#include "engine.h"

namespace bpq {

constexpr char kStepMagic = 'S';
constexpr size_t kStepRequestSize = 8;
constexpr size_t kStepReplySize = 16;
enum StepOp : uint8_t { kStepApply = 1, kStepObserve = 2 };
enum StepStatus : uint8_t { kStepOk = 0, kStepInput = 1, kStepError = 2 };

struct StepRequest {
  uint8_t op = 0;
  uint8_t wants = 0;
  uint32_t session = 0;
  std::string pipeline;
};

// Whether `payload` is a step request (else it is a pickle for the Python loop); fills `request` when it is.
bool parseStepRequest(const std::string &payload, StepRequest &request);

// Runs `request` on `module` (nullptr: no such session) and returns the reply payload. With Autophase asked for, the
// instruction count comes from the same walk of the module.
std::string answerStep(LiveModule *module, const StepRequest &request, const Progress &progress);

// A reply payload for a request that could not run.
std::string stepError(StepStatus status, const std::string &message);

// The parent's end of a session worker's pipes for step requests: a request is encoded, sent and its reply read
// here, so that a step costs Python one call.
class StepChannel {
 public:
  StepChannel(int requestFd, int replyFd, int stderrFd) : requestFd_(requestFd), replyFd_(replyFd), stderrFd_(stderrFd) {}

  // Sends `request` (encoded as steps.h states); records where the worker's stderr stood and when it was sent. False
  // when the pipe is closed (the worker is gone).
  bool send(const StepRequest &request);
  enum Wait { kReplied, kWaiting, kClosed, kInterrupted };
  // Waits up to `seconds` for the reply to the request sent last: kReplied (its payload in `reply`), kWaiting
  // (nothing yet: call again), kClosed (end of file: the worker is gone), kInterrupted (a signal came: the caller
  // runs Python's handlers, then calls again).
  Wait receive(double seconds, std::string &reply);

  int64_t stderrOffset() const { return stderrOffset_; }
  double sentAt() const { return sentAt_; }  // CLOCK_MONOTONIC seconds, as Python's time.monotonic()
  uint8_t wants() const { return wants_; }   // of the request sent last

 private:
  int requestFd_, replyFd_, stderrFd_;
  int64_t stderrOffset_ = 0;
  double sentAt_ = 0;
  uint8_t wants_ = 0;
};

// Reads one message from `fd` into `payload`; false at end of file (or a truncated message: the parent is gone).
bool readMessage(int fd, std::string &payload);
// Writes one message (size header and payload); false when the pipe is closed.
bool writeMessage(int fd, const std::string &payload);

}  // namespace bpq
