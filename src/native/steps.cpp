#include "steps.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace bpq {

namespace {

template <typename T>
void append(std::string &out, T value) {
  out.append(reinterpret_cast<const char *>(&value), sizeof(T));  // the hosts we build for are little-endian
}

bool readFully(int fd, char *data, size_t size) {
  while (size > 0) {
    const ssize_t got = ::read(fd, data, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    data += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

bool parseStepRequest(const std::string &payload, StepRequest &request) {
  if (payload.size() < kStepRequestSize || payload[0] != kStepMagic) return false;
  request.op = static_cast<uint8_t>(payload[1]);
  request.wants = static_cast<uint8_t>(payload[2]);
  std::memcpy(&request.session, payload.data() + 4, sizeof(uint32_t));
  request.pipeline.assign(payload, kStepRequestSize, std::string::npos);
  return true;
}

std::string stepError(StepStatus status, const std::string &message) {
  std::string reply;
  append<uint8_t>(reply, status);
  reply.append(7, '\0');
  append<int64_t>(reply, 0);
  return reply + message;
}

std::string answerStep(LiveModule *module, const StepRequest &request, const Progress &progress) {
  if (module == nullptr) return stepError(kStepError, "KeyError: no live session " + std::to_string(request.session));
  if (request.op != kStepApply && request.op != kStepObserve)
    return stepError(kStepError, "ValueError: unknown step operation " + std::to_string(request.op));
  try {
    const bool changed = request.op == kStepApply && module->apply(request.pipeline, progress);
    const bool wantsAutophase = request.wants & 1, wantsInstcount = request.wants & 2;
    AutophaseVector features{};
    std::vector<int64_t> counts;
    int64_t total = 0;
    if (wantsAutophase)
      features = module->autophase(&total);
    else
      total = module->instructionCount();
    if (wantsInstcount) counts = module->instcount();
    std::string reply;
    reply.reserve(kStepReplySize + sizeof(int64_t) * (kNumAutophase + counts.size()));
    append<uint8_t>(reply, kStepOk);
    append<uint8_t>(reply, changed);
    reply.append(6, '\0');
    append<int64_t>(reply, total);
    if (wantsAutophase) reply.append(reinterpret_cast<const char *>(features.data()), sizeof(int64_t) * kNumAutophase);
    if (wantsInstcount) reply.append(reinterpret_cast<const char *>(counts.data()), sizeof(int64_t) * counts.size());
    return reply;
  } catch (const InputError &e) {
    return stepError(kStepInput, e.what());
  } catch (const std::exception &e) {
    return stepError(kStepError, e.what());
  }
}

bool StepChannel::send(const StepRequest &request) {
  std::string payload;
  payload.reserve(kStepRequestSize + request.pipeline.size());
  payload += kStepMagic;
  append<uint8_t>(payload, request.op);
  append<uint8_t>(payload, request.wants);
  payload += '\0';
  append<uint32_t>(payload, request.session);
  payload += request.pipeline;
  const off_t offset = ::lseek(stderrFd_, 0, SEEK_END);
  stderrOffset_ = offset < 0 ? 0 : offset;
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  sentAt_ = static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
  wants_ = request.wants;
  return writeMessage(requestFd_, payload);
}

StepChannel::Wait StepChannel::receive(double seconds, std::string &reply) {
  pollfd ready{replyFd_, POLLIN, 0};
  const int found = ::poll(&ready, 1, static_cast<int>(seconds * 1000));
  if (found < 0) return errno == EINTR ? kInterrupted : kClosed;
  if (found == 0) return kWaiting;
  // The worker writes a reply whole, in one write: once some of it is here, the rest follows (or end of file).
  return readMessage(replyFd_, reply) ? kReplied : kClosed;
}

bool readMessage(int fd, std::string &payload) {
  uint64_t size = 0;
  if (!readFully(fd, reinterpret_cast<char *>(&size), sizeof(size))) return false;
  payload.resize(size);
  return readFully(fd, payload.data(), size);
}

bool writeMessage(int fd, const std::string &payload) {
  std::string message;
  message.reserve(sizeof(uint64_t) + payload.size());
  append<uint64_t>(message, payload.size());
  message += payload;
  const char *data = message.data();
  size_t left = message.size();
  while (left > 0) {
    const ssize_t put = ::write(fd, data, left);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    data += put;
    left -= static_cast<size_t>(put);
  }
  return true;
}

}  // namespace bpq
