// The Python face of the native core: behavioral_pq._native. Heavy calls release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "engine.h"
#include "features.h"
#include "programl.h"
#include "steps.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

namespace py = pybind11;
using namespace bpq;

namespace {

std::string bytesOf(const py::bytes &b) { return std::string(b); }

// Text from LLVM (names are raw bytes) as str, undecodable bytes replaced.
py::str utf8(const std::string &s) {
  PyObject *text = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!text) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

template <typename T>
py::array_t<T> vectorArray(const std::vector<T> &v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

py::list intFeatures(const std::vector<IntFeature> &features) {
  py::list out;
  for (const IntFeature &f : features) out.append(py::make_tuple(f.owner, f.name, f.values));
  return out;
}

py::dict programGraphDict(const ProgramGraph &g) {
  py::dict out;
  out["node_type"] = vectorArray(g.nodeType);
  out["node_function"] = vectorArray(g.nodeFunction);
  out["node_block"] = vectorArray(g.nodeBlock);
  py::list text, fullText;
  for (size_t i = 0; i < g.nodeType.size(); ++i) {
    text.append(utf8(g.nodeText[i]));
    fullText.append(g.hasFullText[i] ? py::object(utf8(g.nodeFullText[i])) : py::object(py::none()));
  }
  out["node_text"] = text;
  out["node_full_text"] = fullText;
  const auto e = static_cast<py::ssize_t>(g.edges.size() / 4);
  py::array_t<int32_t> edges({e, py::ssize_t(4)});
  std::copy(g.edges.begin(), g.edges.end(), edges.mutable_data());
  out["edges"] = edges;
  out["node_features"] = intFeatures(g.nodeFeatures);
  py::list functions;
  for (const std::string &name : g.functionNames) functions.append(utf8(name));
  out["functions"] = functions;
  out["function_features"] = intFeatures(g.functionFeatures);
  out["module"] = utf8(g.moduleName);
  out["target_triple"] = utf8(g.targetTriple);
  out["data_layout"] = utf8(g.dataLayout);
  out["module_features"] = g.moduleFeatures;
  return out;
}

py::array_t<int64_t> toArray(const std::vector<int64_t> &v) {
  py::array_t<int64_t> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

// A writable buffer of at least 3 int64 per thread slot (e.g. a SharedMemory's buf), or None.
Progress progressOf(const py::object &buffer) {
  Progress p;
  if (buffer.is_none()) return p;
  py::buffer_info info = py::buffer(buffer).request(/*writable=*/true);
  const py::ssize_t bytes = info.size * info.itemsize;
  if (bytes < 24) throw py::value_error("progress buffer needs at least 24 bytes");
  p.slots = static_cast<int64_t *>(info.ptr);
  p.capacity = static_cast<int>(bytes / 24);
  return p;
}

[[noreturn]] void raiseEndOfFile() {
  PyErr_SetString(PyExc_EOFError, "the session worker closed its pipe");
  throw py::error_already_set();
}

// (changed, instruction count, Autophase int64 (56,) or None, InstCount int64 or None) of a step reply (steps.h);
// InputError with the worker's message for a request it could not run.
py::object decodeStep(const std::string &reply, uint8_t wants) {
  if (reply.size() < kStepReplySize) throw InputError("a step reply of " + std::to_string(reply.size()) + " bytes");
  if (reply[0] != kStepOk) throw InputError(reply.substr(kStepReplySize));
  int64_t count = 0;
  std::memcpy(&count, reply.data() + 8, sizeof(count));
  size_t offset = kStepReplySize;
  auto values = [&](size_t n) {
    if (offset + n * sizeof(int64_t) > reply.size()) throw InputError("a step reply shorter than its values");
    py::array_t<int64_t> out(static_cast<py::ssize_t>(n));
    std::memcpy(out.mutable_data(), reply.data() + offset, n * sizeof(int64_t));
    offset += n * sizeof(int64_t);
    return py::object(out);
  };
  py::object features = (wants & 1) ? values(kNumAutophase) : py::object(py::none());
  py::object counts = (wants & 2) ? values((reply.size() - offset) / sizeof(int64_t)) : py::object(py::none());
  return py::make_tuple(reply[1] != 0, count, features, counts);
}

// Waits up to `seconds` for the reply to the channel's last request: its decoded values, or None while it runs.
py::object awaitStep(StepChannel &channel, double seconds) {
  std::string reply;
  while (true) {
    StepChannel::Wait wait;
    {
      py::gil_scoped_release release;
      wait = channel.receive(seconds, reply);
    }
    switch (wait) {
      case StepChannel::kReplied: return decodeStep(reply, channel.wants());
      case StepChannel::kWaiting: return py::none();
      case StepChannel::kClosed: raiseEndOfFile();
      case StepChannel::kInterrupted:
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // KeyboardInterrupt and the like
        break;
    }
  }
}

template <typename F>
auto withModule(const std::string &bitcode, F f) {
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> M = parseBitcode(bitcode, ctx);
  return f(*M);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "behavioral_pq native core (LLVM " LLVM_VERSION_STRING ")";
  py::register_exception<InputError>(m, "InputError", PyExc_ValueError);

  m.attr("LLVM_VERSION") = LLVM_VERSION_STRING;
  m.attr("LLVM_VERSION_MAJOR") = LLVM_VERSION_MAJOR;
  m.def("autophase_names", &autophaseNames);
  m.def("instcount_names", &instcountNames);

  m.def("prepare", [](const py::bytes &data, const std::string &name) {
    std::string in = bytesOf(data), out;
    {
      py::gil_scoped_release release;
      out = prepare(in, name);
    }
    return py::bytes(out);
  }, py::arg("data"), py::arg("name"), "Parse .ll text or bitcode, verify, strip debug info and named metadata.");

  m.def("to_text", [](const py::bytes &bitcode) { return bitcodeToText(bytesOf(bitcode)); });

  m.def("autophase", [](const py::bytes &bitcode) {
    const AutophaseVector v = withModule(bytesOf(bitcode), [](llvm::Module &M) { return autophase(M); });
    return toArray(std::vector<int64_t>(v.begin(), v.end()));
  }, "int64 (56,)");

  m.def("instcount", [](const py::bytes &bitcode) {
    return toArray(withModule(bytesOf(bitcode), [](llvm::Module &M) { return instcount(M); }));
  }, "int64 (len(instcount_names()),)");

  m.def("programl", [](const py::bytes &bitcode) {
    std::string in = bytesOf(bitcode);
    ProgramGraph graph;
    {
      py::gil_scoped_release release;
      graph = withModule(in, [](llvm::Module &M) { return programGraph(M); });
    }
    return programGraphDict(graph);
  }, "ProGraML graph as arrays: node_type int8 (N,), node_function / node_block int32 (N,), node_text and "
     "node_full_text lists of N str (None: no full_text), edges int32 (E, 4) rows (flow, position, source, target), "
     "node_features / function_features lists of (index, name, [int]), functions (names), module, target_triple, "
     "data_layout, module_features [(name, int)].");

  m.def("instruction_count", [](const py::bytes &bitcode) {
    return withModule(bytesOf(bitcode), [](llvm::Module &M) { return M.getInstructionCount(); });
  });

  m.def("check_pipeline", [](const std::string &pipeline) {
    py::gil_scoped_release release;
    return checkPipeline(pipeline);
  }, "Empty string if the new-PM pipeline parses, else the parser's message.");

  m.def("run_pipeline", [](const py::bytes &bitcode, const std::string &pipeline, const py::object &progress,
                           const std::string &triple, const std::string &cpu, const std::string &features,
                           const std::string &size) {
    std::string in = bytesOf(bitcode), out;
    Progress p = progressOf(progress);
    {
      py::gil_scoped_release release;
      out = runPipeline(in, pipeline, p, TargetSpec{triple, cpu, features, size});
    }
    return py::bytes(out);
  }, py::arg("bitcode"), py::arg("pipeline"), py::arg("progress") = py::none(), py::arg("triple") = "",
     py::arg("cpu") = "", py::arg("features") = "", py::arg("size") = "",
     "Apply a pipeline; an empty triple is measure mode (no TargetMachine), else target mode for triple/cpu "
     "(size \"Oz\" / \"Os\": every definition marked minsize/optsize first, as clang -Oz / -Os marks them).");

  m.def("host_target", [] {
    TargetSpec host = hostTarget();
    return py::make_tuple(host.triple, host.cpu, host.features);
  }, "(triple, cpu, features) of this machine, as clang -march=native sees it.");

  m.def("autophase_after", [](const std::vector<py::bytes> &bitcodes, const std::vector<std::string> &pipelines,
                              int threads, const py::object &progress) {
    std::vector<std::string> in;
    in.reserve(bitcodes.size());
    for (const py::bytes &b : bitcodes) in.push_back(bytesOf(b));
    Progress p = progressOf(progress);
    BatchResult result;
    {
      py::gil_scoped_release release;
      result = autophaseAfter(in, pipelines, threads, p);
    }
    const auto n = static_cast<py::ssize_t>(in.size());
    const auto rows = static_cast<py::ssize_t>(pipelines.size() + 1);
    py::array_t<int64_t> features({n, rows, static_cast<py::ssize_t>(kNumAutophase)});
    std::copy(result.features.begin(), result.features.end(), features.mutable_data());
    py::list errors;
    for (const std::string &e : result.errors) errors.append(e.empty() ? py::object(py::none()) : py::str(e));
    return py::make_tuple(features, errors);
  }, py::arg("bitcodes"), py::arg("pipelines"), py::arg("threads") = 1, py::arg("progress") = py::none(),
     "Returns (int64 (N, P + 1, 56), list of N error messages or None). Row 0 is the module as given.");

  m.def("autophase_tree", [](const std::vector<py::bytes> &roots, const std::vector<int64_t> &parents,
                             const std::vector<std::string> &edges, const std::vector<uint8_t> &wanted,
                             const std::vector<uint8_t> &keep, int threads, const py::object &progress) {
    std::vector<std::string> in;
    in.reserve(roots.size());
    for (const py::bytes &b : roots) in.push_back(bytesOf(b));
    Progress p = progressOf(progress);
    TreeResult result;
    {
      py::gil_scoped_release release;
      result = autophaseTree(in, parents, edges, wanted, keep, threads, p);
    }
    const auto k = static_cast<py::ssize_t>(parents.size());
    py::array_t<int64_t> features({k, static_cast<py::ssize_t>(kNumAutophase)});
    std::copy(result.features.begin(), result.features.end(), features.mutable_data());
    py::dict kept;
    py::list errors;
    for (py::ssize_t i = 0; i < k; ++i) {
      if (keep[i] && result.errors[i].empty()) kept[py::int_(i)] = py::bytes(result.kept[i]);
      errors.append(result.errors[i].empty() ? py::object(py::none()) : py::str(result.errors[i]));
    }
    return py::make_tuple(features, kept, errors);
  }, py::arg("roots"), py::arg("parents"), py::arg("edges"), py::arg("wanted"), py::arg("keep"),
     py::arg("threads") = 1, py::arg("progress") = py::none(),
     "Prefix-tree evaluation: returns (int64 (K, 56) Autophase at wanted nodes, {node: bitcode} at kept nodes, "
     "list of K error messages or None). parents[k] >= 0 is a node, -r-1 is roots[r].");

  py::class_<LiveModule>(m, "LiveModule",
                         "A module kept in memory between passes (its own LLVMContext): apply passes in place, read "
                         "features in place, write bitcode only when asked.")
      .def(py::init([](const py::bytes &bitcode) {
        std::string in = bytesOf(bitcode);
        py::gil_scoped_release release;
        return std::make_unique<LiveModule>(in);
      }), py::arg("bitcode"))
      .def("apply", [](LiveModule &self, const std::string &pipeline, const py::object &progress) {
        Progress p = progressOf(progress);
        py::gil_scoped_release release;
        return self.apply(pipeline, p);
      }, py::arg("pipeline"), py::arg("progress") = py::none(),
         "Run a new-PM pipeline in place; returns whether the module changed.")
      .def("autophase", [](const LiveModule &self) {
        const AutophaseVector v = self.autophase();
        return toArray(std::vector<int64_t>(v.begin(), v.end()));
      }, "int64 (56,)")
      .def("instcount", [](const LiveModule &self) { return toArray(self.instcount()); },
           "int64 (len(instcount_names()),)")
      .def("observe", [](const LiveModule &self, bool autophase, bool instcount) {
        int64_t count = 0;
        py::object features = py::none();
        if (autophase) {
          const AutophaseVector v = self.autophase(&count);
          features = toArray(std::vector<int64_t>(v.begin(), v.end()));
        } else {
          count = self.instructionCount();
        }
        py::object counts = instcount ? py::object(toArray(self.instcount())) : py::object(py::none());
        return py::make_tuple(count, features, counts);
      }, py::arg("autophase") = false, py::arg("instcount") = false,
         "(instruction count, Autophase int64 (56,) or None, InstCount or None): with Autophase, one walk of the "
         "module gives both.")
      .def("instruction_count", &LiveModule::instructionCount)
      .def("bitcode", [](const LiveModule &self, bool preserveUseListOrder) {
        std::string out;
        {
          py::gil_scoped_release release;
          out = self.bitcode(preserveUseListOrder);
        }
        return py::bytes(out);
      }, py::arg("preserve_use_list_order") = false,
         "Bitcode as run_pipeline writes it; with use-list order preserved, a copy parsed from it continues "
         "exactly as this module would (what a fork uses).");

  m.def("serve_steps", [](int requestFd, int replyFd, const py::dict &modules, const py::object &progress) {
    // The worker's loop for step requests (steps.h): answered here, with the GIL released around I/O and LLVM,
    // until another kind of request arrives: its payload is returned for the Python loop (None at end of file).
    const Progress p = progressOf(progress);
    std::string payload;
    StepRequest request;
    while (true) {
      bool more;
      {
        py::gil_scoped_release release;
        more = readMessage(requestFd, payload);
      }
      if (!more) return py::object(py::none());
      if (!parseStepRequest(payload, request)) return py::object(py::bytes(payload));
      LiveModule *module = nullptr;
      const py::int_ key(request.session);
      if (modules.contains(key)) module = modules[key].cast<LiveModule *>();
      bool written;
      {
        py::gil_scoped_release release;
        written = writeMessage(replyFd, answerStep(module, request, p));
      }
      if (!written) return py::object(py::none());
    }
  }, py::arg("request_fd"), py::arg("reply_fd"), py::arg("modules"), py::arg("progress") = py::none(),
     "Answer step requests read from request_fd on reply_fd, modules being {session id: LiveModule}, until "
     "another request comes (its payload is returned) or the input ends (None).");

  py::class_<StepChannel>(m, "StepChannel",
                          "The parent's end of a session worker's pipes for step requests: send one and wait for "
                          "its reply in one call (steps.h).")
      .def(py::init<int, int, int>(), py::arg("request_fd"), py::arg("reply_fd"), py::arg("stderr_fd"))
      .def("step", [](StepChannel &self, int op, uint32_t session, bool autophase, bool instcount,
                      const std::string &pipeline, double seconds) {
        StepRequest request;
        request.op = static_cast<uint8_t>(op);
        request.wants = static_cast<uint8_t>(autophase | instcount << 1);
        request.session = session;
        request.pipeline = pipeline;
        bool sent;
        {
          py::gil_scoped_release release;
          sent = self.send(request);
        }
        if (!sent) raiseEndOfFile();
        return awaitStep(self, seconds);
      }, py::arg("op"), py::arg("session"), py::arg("autophase"), py::arg("instcount"), py::arg("pipeline"),
         py::arg("seconds"),
         "Send a step request and wait up to `seconds` for its reply: (changed, instruction count, Autophase or "
         "None, InstCount or None), or None while it runs (then `wait`). EOFError when the worker is gone, "
         "InputError with its message for a request it could not run.")
      .def("wait", &awaitStep, py::arg("seconds"), "Wait again for the last request's reply, as `step` does.")
      .def_property_readonly("stderr_offset", &StepChannel::stderrOffset,
                             "Where the worker's stderr file stood when the last request was sent.")
      .def_property_readonly("sent_at", &StepChannel::sentAt,
                             "When the last request was sent, in time.monotonic() seconds.");

  m.def("time_pipelines", [](const py::bytes &bitcode, const std::vector<std::string> &pipelines) {
    std::string in = bytesOf(bitcode);
    py::gil_scoped_release release;
    return timePipelines(in, pipelines);
  }, "Benchmark floor: [seconds in passes, seconds parsing copies, seconds in features].");
}
