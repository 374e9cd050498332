#include "kernels/export/pipeline_export.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"
#include "kernels/export/bundle_gen.h"
#include "kernels/export/c_expr.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace kl::exporter {

namespace fs = std::filesystem;
using detail::cIdent;
using detail::lowerOf;
using detail::upperOf;

namespace {

    std::string stagesList(const Pipeline& p)
    {
        std::string s;
        for (const auto& st : p.stages)
            s += (s.empty() ? "" : ", ") + st.name;
        return s;
    }

    // The stage's candidate: its session loaded and checked against the stage's problem, planned as `kloop export`
    // plans one candidate.
    void planCandidateStage(PipelineStageExport& e, const PipelineStage& st, const fs::path& dir,
        const std::string& candidate, const std::string& where, double minSpeedup)
    {
        std::error_code ec;
        if (!fs::is_directory(dir, ec))
            throw InputError(where + ": no session at " + dir.string());
        Session s;
        try {
            s = SessionStore::load(dir);
        } catch (const std::exception& x) {
            throw InputError(where + ": " + x.what());
        }
        if (s.problemName != st.problemName)
            throw InputError(where + ": session " + s.id + " tunes problem " + s.problemName + ", but stage " + st.name
                + " runs " + st.problemName);
        std::string id = candidate;
        try {
            if (id.empty())
                id = defaultCandidate(s);
            if (!s.tree.contains(id))
                throw InputError("session " + s.id + " has no candidate '" + abbreviate(id) + "'");
            refuseScreened(s, id);
            e.plan = planExport(s, st.problem, id, minSpeedup);
        } catch (const InputError& x) {
            throw InputError(where + ": " + x.what());
        }
        e.plan.prefix = e.prefix;
        e.sessionName = fs::absolute(dir, ec).lexically_normal().filename().string();
        if (e.sessionName.empty())
            e.sessionName = s.id;
        e.session = std::make_shared<const Session>(std::move(s));
    }

    // Everything the entry point, the self-test and the torch op need about the pipeline's tensors, as C.
    struct PipelineC {
        const Pipeline* p = nullptr;
        const PipelineExportPlan* plan = nullptr;
        std::string P, U;
        std::vector<const DimSpec*> dims; // the pipeline's free dims (constants are baked)
        struct Tensor {
            std::string name; // the C parameter
            TensorSource source;
            const TensorSpec* spec = nullptr; // as its describing stage declares it
            int describingStage = 0;
            bool output = false;
            bool written = false; // updated in place by some stage (an input declared void*)
        };
        std::vector<Tensor> tensors; // pipeline inputs, then outputs: the C API's parameters in order
        struct Intermediate {
            TensorSource source;
            const TensorSpec* spec = nullptr;
            int stage = 0;
        };
        std::vector<Intermediate> intermediates; // stage outputs no pipeline output names

        std::string dimsType() const { return P + "_dims"; }
        // The pipeline's dims (and constants) as C, reading a `const P_dims* dims`.
        IdentifierMap pipelineIds() const
        {
            return [this](const std::string& name) -> std::string {
                const DimSpec* d = p->space.dim(name);
                if (!d)
                    throw InputError("pipeline " + p->name + ": '" + name + "' is not a dim or constant");
                if (d->constant)
                    return std::to_string(d->min) + ".0";
                return "((double)dims->" + cIdent(name) + ")";
            };
        }
        // A stage problem's dims as C, reading the layout's stage dims struct.
        IdentifierMap stageIds(int stage) const
        {
            const Problem& sp = p->stages[static_cast<std::size_t>(stage)].problem;
            return [&sp, stage](const std::string& name) -> std::string {
                if (!sp.dim(name))
                    throw InputError("problem " + sp.name + ": '" + name + "' is not a dim");
                return "((double)l->d" + std::to_string(stage) + "." + cIdent(name) + ")";
            };
        }
        std::string var(const TensorSource& s) const
        {
            for (const auto& t : tensors)
                if (t.source == s)
                    return cIdent(t.name);
            return "kl_b_" + cIdent(s.stage) + "_" + cIdent(s.tensor);
        }
        std::string params() const
        {
            std::string s = "const " + dimsType() + "* dims";
            for (const auto& t : tensors)
                s += std::string(", ") + (t.output || t.written ? "void* " : "const void* ") + cIdent(t.name);
            return s + ", void* workspace, size_t workspace_bytes, cudaStream_t stream";
        }
        std::string args() const
        {
            std::string s = "dims";
            for (const auto& t : tensors)
                s += ", " + cIdent(t.name);
            return s + ", workspace, workspace_bytes, stream";
        }
        // The C expression of one extent of a tensor of stage `stage` (inside a function holding `l`).
        std::string extent(int stage, const Expr& e, const std::string& what) const
        {
            return toCExpression(e.text(), stageIds(stage), what);
        }
    };

    PipelineC describe(const Pipeline& p, const PipelineExportPlan& plan)
    {
        PipelineC c;
        c.p = &p;
        c.plan = &plan;
        c.P = plan.prefix;
        c.U = upperOf(plan.prefix);
        for (const auto& d : p.space.dims)
            if (!d.constant)
                c.dims.push_back(&d);
        std::set<std::string> writtenInputs;
        for (const auto& st : p.stages)
            for (const auto& t : st.problem.tensors)
                if (t.role == TensorRole::InOut && st.inputs.at(t.name).stage.empty())
                    writtenInputs.insert(st.inputs.at(t.name).tensor);
        for (const auto& in : p.inputs) {
            const TensorSource src { "", in };
            c.tensors.push_back({ in, src, p.sourceSpec(src), p.stageIndex(p.describingStage(src)->name), false,
                writtenInputs.count(in) > 0 });
        }
        for (const auto& o : p.outputs)
            c.tensors.push_back({ o.name, o.source, p.sourceSpec(o.source), p.stageIndex(o.source.stage), true, true });
        for (std::size_t i = 0; i < p.stages.size(); ++i)
            for (const auto& t : p.stages[i].problem.tensors) {
                const TensorSource src { p.stages[i].name, t.name };
                if (t.role != TensorRole::Output
                    || std::any_of(p.outputs.begin(), p.outputs.end(), [&](const auto& o) { return o.source == src; }))
                    continue;
                c.intermediates.push_back({ src, &t, static_cast<int>(i) });
            }
        return c;
    }

    std::string genHeader(const PipelineC& c)
    {
        const Pipeline& p = *c.p;
        const std::string& P = c.P;
        const std::string& U = c.U;
        std::ostringstream o;
        o << "/* " << P << ".h: the exported pipeline " << p.name << ", one call for all its stages.\n";
        o << " * " << detail::commentSafe(p.description) << "\n *\n * Stages, in order:\n";
        for (std::size_t i = 0; i < p.stages.size(); ++i) {
            const auto& st = p.stages[i];
            const auto& e = c.plan->stages[i];
            o << " *   " << st.name << ": " << st.problemName << ", "
              << (e.hasCandidate() ? "candidate " + e.plan.candidateId + " of session " + e.session->id
                             + " where it was measured faster, the fallback elsewhere"
                                   : "the fallback, " + detail::commentSafe(e.plan.fallbackDescription))
              << " (" << e.prefix << ".h)\n";
        }
        o << " *\n * Tensors (device pointers, contiguous, row-major; dtypes and extents as " << P
          << "_tensor_extents() gives them):\n";
        for (const auto& t : c.tensors)
            o << " *   " << t.name << ": " << dtypeName(t.spec->dtype) << ", "
              << (t.output           ? "output of " + t.source.text()
                         : t.written ? "input, updated in place"
                                     : "input")
              << "\n";
        o << " * The intermediates (";
        for (std::size_t i = 0; i < c.intermediates.size(); ++i)
            o << (i ? ", " : "") << c.intermediates[i].source.text();
        o << ") live in the caller's workspace, with the stages' own workspace:\n"
             " * size it with "
          << P
          << "_workspace_bytes() and allocate it once (256-byte aligned, as cudaMalloc is), outside the hot path.\n"
             " * "
          << P
          << "_run() allocates nothing and never synchronizes: the whole pipeline can be captured into one CUDA graph\n"
             " * (call "
          << P << "_init() first, once per thread).\n */\n";
        o << "#ifndef " << U << "_H\n#define " << U << "_H\n\n#include <stddef.h>\n#include <cuda_runtime_api.h>\n\n";
        o << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
        o << "typedef struct " << c.dimsType() << " {\n";
        for (const auto* d : c.dims)
            o << "    long long " << cIdent(d->name) << "; /* [" << d->min << ", " << d->max << "] */\n";
        if (c.dims.empty())
            o << "    long long unused;\n";
        o << "} " << c.dimsType() << ";\n\n";
        o << "enum {\n    " << U << "_OK = 0,\n    " << U << "_ERR_UNSUPPORTED_SHAPE = 1,\n    " << U
          << "_ERR_WORKSPACE_TOO_SMALL = 2,\n    " << U << "_ERR_BAD_ARGUMENT = 4,\n    /* a stage failed: " << U
          << "_ERR_STAGE * (stage + 1) + that stage's error code */\n    " << U << "_ERR_STAGE = 100\n};\n\n";
        o << "int " << P << "_stage_count(void);\n";
        o << "const char* " << P << "_stage_name(int stage);\n";
        o << "/* 1 when the stage runs an exported candidate (inside its verified-and-faster boxes), 0: the fallback. "
             "*/\n";
        o << "int " << P << "_stage_has_candidate(int stage);\n";
        o << "/* 1 when dims are inside the pipeline's validity range. */\n";
        o << "int " << P << "_valid(const " << c.dimsType() << "* dims, const char** why);\n";
        o << "/* Tensor i (in the parameter order of " << P
          << "_run): its rank, extents written to extents[0..rank); -1 when dims do not evaluate. */\n";
        o << "int " << P << "_tensor_count(void);\n";
        o << "const char* " << P << "_tensor_name(int tensor);\n";
        o << "int " << P << "_tensor_extents(const " << c.dimsType() << "* dims, int tensor, long long* extents);\n";
        o << "/* The intermediates and the largest stage workspace; (size_t)-1 when dims have no valid size. */\n";
        o << "size_t " << P << "_workspace_bytes(const " << c.dimsType() << "* dims);\n";
        o << "/* Every stage's init (cuBLAS handles, Triton CUBINs): once per thread before the first run or capture. "
             "*/\n";
        o << "int " << P << "_init(void);\n";
        o << "/* The stages in order, each through its dispatcher (its candidate where it was measured faster). */\n";
        o << "int " << P << "_run(" << c.params() << ");\n";
        o << "/* Every stage on its fallback: the all-fallback pipeline the self-test compares against. */\n";
        o << "int " << P << "_run_fallback(" << c.params() << ");\n";
        o << "/* -1, or the stage whose failure the code reports. */\n";
        o << "int " << P << "_failed_stage(int code);\n";
        o << "const char* " << P << "_error_string(int code);\n\n";
        o << "#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
        return o.str();
    }

    std::string genEntryPoint(const PipelineC& c)
    {
        const Pipeline& p = *c.p;
        const std::string& P = c.P;
        const std::string& U = c.U;
        const std::size_t n = p.stages.size();
        std::ostringstream o;
        o << "/* " << P << ".c: the pipeline's entry point over its stages' bundles. Plain C. */\n";
        o << "#include \"" << P << ".h\"\n#include \"kl_expr.h\"\n";
        for (const auto& e : c.plan->stages)
            o << "#include \"" << e.prefix << ".h\"\n";
        o << "\n#include <limits.h>\n#include <stddef.h>\n\n";
        o << "static const char* const kl_stage_names[] = {";
        for (std::size_t i = 0; i < n; ++i)
            o << (i ? ", " : "") << "\"" << p.stages[i].name << "\"";
        o << "};\nstatic const int kl_stage_candidates[] = {";
        for (std::size_t i = 0; i < n; ++i)
            o << (i ? ", " : "") << (c.plan->stages[i].hasCandidate() ? 1 : 0);
        o << "};\nstatic const char* const kl_tensor_names[] = {";
        for (std::size_t i = 0; i < c.tensors.size(); ++i)
            o << (i ? ", " : "") << "\"" << c.tensors[i].name << "\"";
        o << "};\n\n";
        o << "int " << P << "_stage_count(void) { return " << n << "; }\n";
        o << "const char* " << P << "_stage_name(int stage) { return stage >= 0 && stage < " << n
          << " ? kl_stage_names[stage] : NULL; }\n";
        o << "int " << P << "_stage_has_candidate(int stage) { return stage >= 0 && stage < " << n
          << " ? kl_stage_candidates[stage] : 0; }\n";
        o << "int " << P << "_tensor_count(void) { return " << c.tensors.size() << "; }\n";
        o << "const char* " << P << "_tensor_name(int tensor) { return tensor >= 0 && tensor < " << c.tensors.size()
          << " ? kl_tensor_names[tensor] : NULL; }\n\n";

        o << "int " << P << "_valid(const " << c.dimsType() << "* dims, const char** why)\n{\n";
        o << "    if (!dims) {\n        if (why) *why = \"no dims\";\n        return 0;\n    }\n";
        for (const auto* d : c.dims) {
            o << "    if (dims->" << cIdent(d->name) << " < " << d->min << "LL || dims->" << cIdent(d->name) << " > "
              << d->max << "LL) {\n        if (why) *why = \"" << d->name << " is outside the pipeline's range ["
              << d->min << ", " << d->max << "]\";\n        return 0;\n    }\n";
            if (d->multipleOf > 1)
                o << "    if (dims->" << cIdent(d->name) << " % " << d->multipleOf
                  << "LL != 0) {\n        if (why) *why = \"" << d->name << " is not a multiple of " << d->multipleOf
                  << "\";\n        return 0;\n    }\n";
        }
        for (const auto& e : p.space.dimConstraints)
            o << "    if (!((" << toCExpression(e.text(), c.pipelineIds(), "pipeline constraint")
              << ") != 0.0)) {\n        if (why) *why = \"the pipeline's constraint '" << e.text()
              << "' does not hold\";\n        return 0;\n    }\n";
        o << "    return 1;\n}\n\n";

        // The layout: each stage's dims, then the intermediates and the stage workspace carved from the caller's.
        o << "typedef struct kl_layout {\n";
        for (std::size_t i = 0; i < n; ++i)
            o << "    " << c.plan->stages[i].prefix << "_dims d" << i << ";\n";
        o << "    size_t offset[" << std::max<std::size_t>(c.intermediates.size(), 1) << "];\n"
          << "    size_t stage_offset, stage_bytes, total;\n} kl_layout;\n\n";
        o << "static int kl_plan(const " << c.dimsType() << "* dims, kl_layout* l)\n{\n    long long v = 0;\n"
          << "    size_t off = 0, w = 0;\n    (void)v;\n    (void)w;\n";
        for (std::size_t i = 0; i < n; ++i) {
            const PipelineStage& st = p.stages[i];
            for (const auto& d : st.problem.dims) {
                const auto it = st.dims.find(d.name);
                if (it == st.dims.end()) {
                    o << "    l->d" << i << "." << cIdent(d.name) << " = " << d.min << "LL; /* constant */\n";
                    continue;
                }
                o << "    if (!klx_to_int("
                  << toCExpression(it->second.text(), c.pipelineIds(), "stage " + st.name + " dim " + d.name)
                  << ", LLONG_MIN, LLONG_MAX, &v)) return 0;\n    l->d" << i << "." << cIdent(d.name) << " = v; /* "
                  << detail::commentSafe(it->second.text()) << " */\n";
            }
        }
        for (std::size_t k = 0; k < c.intermediates.size(); ++k) {
            const auto& im = c.intermediates[k];
            std::string numel = "1.0";
            for (const auto& e : im.spec->shape)
                numel = "(" + numel + ") * (" + c.extent(im.stage, e, im.source.text()) + ")";
            o << "    /* " << im.source.text() << ": " << dtypeName(im.spec->dtype) << " */\n";
            o << "    if (!klx_to_int(" << numel << ", 0, LLONG_MAX, &v)) return 0;\n";
            o << "    l->offset[" << k << "] = off;\n    off += ((size_t)v * " << dtypeBytes(im.spec->dtype)
              << "u + 255u) & ~(size_t)255u;\n";
        }
        o << "    l->stage_offset = off;\n    l->stage_bytes = 0;\n";
        for (std::size_t i = 0; i < n; ++i)
            o << "    w = " << c.plan->stages[i].prefix << "_workspace_bytes(&l->d" << i
              << ");\n    if (w == (size_t)-1) return 0;\n    if (w > l->stage_bytes) l->stage_bytes = w;\n";
        o << "    l->total = off + l->stage_bytes;\n    return 1;\n}\n\n";

        o << "int " << P << "_tensor_extents(const " << c.dimsType() << "* dims, int tensor, long long* extents)\n{\n";
        o << "    kl_layout layout;\n    kl_layout* l = &layout;\n    long long v = 0;\n";
        o << "    if (!dims || !extents || !kl_plan(dims, l)) return -1;\n    switch (tensor) {\n";
        for (std::size_t t = 0; t < c.tensors.size(); ++t) {
            const auto& x = c.tensors[t];
            o << "    case " << t << ": /* " << x.name << " */\n";
            for (std::size_t ax = 0; ax < x.spec->shape.size(); ++ax)
                o << "        if (!klx_to_int(" << c.extent(x.describingStage, x.spec->shape[ax], x.name)
                  << ", 0, LLONG_MAX, &v)) return -1;\n        extents[" << ax << "] = v;\n";
            o << "        return " << x.spec->shape.size() << ";\n";
        }
        o << "    default:\n        return -1;\n    }\n}\n\n";

        o << "size_t " << P << "_workspace_bytes(const " << c.dimsType()
          << "* dims)\n{\n    kl_layout l;\n    if (!dims || !" << P
          << "_valid(dims, NULL) || !kl_plan(dims, &l)) return (size_t)-1;\n    return l.total;\n}\n\n";

        o << "int " << P << "_init(void)\n{\n    int rc = 0;\n";
        for (const auto& e : c.plan->stages)
            o << "    if (rc == 0) rc = " << e.prefix << "_init();\n";
        o << "    return rc;\n}\n\n";

        o << "static int kl_run_stages(int fallback, " << c.params() << ")\n{\n";
        o << "    kl_layout layout;\n    kl_layout* l = &layout;\n    char* kl_ws = (char*)workspace;\n"
             "    void* kl_stage_ws;\n    int rc = 0;\n";
        o << "    if (!dims) return " << U << "_ERR_BAD_ARGUMENT;\n";
        o << "    if (!" << P << "_valid(dims, NULL) || !kl_plan(dims, l)) return " << U << "_ERR_UNSUPPORTED_SHAPE;\n";
        o << "    if ((l->total > 0 && !workspace) || workspace_bytes < l->total) return " << U
          << "_ERR_WORKSPACE_TOO_SMALL;\n";
        o << "    kl_stage_ws = l->stage_bytes ? (void*)(kl_ws + l->stage_offset) : NULL;\n";
        for (std::size_t k = 0; k < c.intermediates.size(); ++k)
            o << "    void* " << c.var(c.intermediates[k].source) << " = (void*)(kl_ws + l->offset[" << k << "]);\n";
        o << "    (void)kl_ws;\n";
        for (std::size_t i = 0; i < n; ++i) {
            const PipelineStage& st = p.stages[i];
            const std::string& SP = c.plan->stages[i].prefix;
            std::string args = "&l->d" + std::to_string(i);
            for (const auto& a : detail::apiParams(st.problem)) {
                if (a.tensor)
                    args += ", "
                        + c.var(a.spec->role == TensorRole::Output ? TensorSource { st.name, a.spec->name }
                                                                   : st.inputs.at(a.spec->name));
                else
                    args += ", (" + a.cType + ")" + detail::scalarValueC(*a.scalar, "(&l->d" + std::to_string(i) + ")");
            }
            args += ", kl_stage_ws, l->stage_bytes, stream";
            o << "    /* " << st.name << ": " << st.problemName << " */\n";
            o << "    rc = fallback ? " << SP << "_run_fallback(" << args << ")\n                  : " << SP << "_run("
              << args << ");\n";
            o << "    if (rc != 0) return " << U << "_ERR_STAGE * " << i + 1 << " + rc;\n";
        }
        o << "    return " << U << "_OK;\n}\n\n";
        o << "int " << P << "_run(" << c.params() << ")\n{\n    return kl_run_stages(0, " << c.args() << ");\n}\n\n";
        o << "int " << P << "_run_fallback(" << c.params() << ")\n{\n    return kl_run_stages(1, " << c.args()
          << ");\n}\n\n";
        o << "int " << P << "_failed_stage(int code)\n{\n    const int stage = code / " << U
          << "_ERR_STAGE - 1;\n    return stage >= 0 && stage < " << n << " ? stage : -1;\n}\n\n";
        o << "const char* " << P << "_error_string(int code)\n{\n    switch (" << P << "_failed_stage(code)) {\n";
        for (std::size_t i = 0; i < n; ++i)
            o << "    case " << i << ":\n        return " << c.plan->stages[i].prefix << "_error_string(code % " << U
              << "_ERR_STAGE);\n";
        o << "    default:\n        break;\n    }\n    switch (code) {\n";
        o << "    case " << U << "_OK: return \"ok\";\n";
        o << "    case " << U << "_ERR_UNSUPPORTED_SHAPE: return \"dims outside the pipeline's validity range\";\n";
        o << "    case " << U << "_ERR_WORKSPACE_TOO_SMALL: return \"workspace missing or smaller than " << P
          << "_workspace_bytes()\";\n";
        o << "    case " << U << "_ERR_BAD_ARGUMENT: return \"bad argument\";\n";
        o << "    default: return \"unknown error\";\n    }\n}\n";
        return o.str();
    }

    // The end-to-end tolerance of one pipeline output in the bundle: pipelineTolerance's floor, the producing
    // problem's own tolerance for the output's dtype (the bundle has no honest measurement of its own to widen it).
    Tolerance outputTolerance(const Pipeline& p, const PipelineOutput& o)
    {
        return p.stage(o.source.stage)->problem.toleranceFor(p.sourceSpec(o.source)->dtype);
    }

    // A shape by the pipeline's free dims ("T=16"): its constants are the same in every shape.
    std::string freeLabel(const Pipeline& p, const Shape& s)
    {
        Shape free;
        for (const auto& d : p.space.dims)
            if (!d.constant)
                free.dims[d.name] = s.dims.at(d.name);
        return free.label();
    }

    std::vector<Shape> selfTestShapes(const Pipeline& p)
    {
        std::vector<Shape> out;
        for (const auto* list : { &p.space.verifyShapes, &p.space.tuningShapes })
            for (const Shape& s : *list) {
                const Shape full = p.space.withConstants(s);
                if (std::find(out.begin(), out.end(), full) == out.end())
                    out.push_back(full);
            }
        return out;
    }

    std::string genSelfTest(const PipelineC& c)
    {
        const Pipeline& p = *c.p;
        const std::string& P = c.P;
        const std::vector<Shape> shapes = selfTestShapes(p);
        const std::size_t nd = std::max<std::size_t>(c.dims.size(), 1);
        std::ostringstream o;
        o << "/* pipeline_selftest.cu: runs the pipeline " << p.name << " through " << P
          << "_run on fresh random inputs at its verify\n"
             "   and tuning shapes and compares every output with the all-fallback pipeline ("
          << P
          << "_run_fallback) within the end-to-end\n"
             "   tolerance; replays "
          << P
          << "_run from one CUDA graph and compares again; times both graphs interleaved. Exit 0: passed;\n"
             "   77: no CUDA device. */\n";
        o << "#include \"" << P
          << ".h\"\n\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include <cuda_fp8.h>\n#include "
             "<cuda_runtime.h>\n\n#include <algorithm>\n#include <cmath>\n#include <cstdint>\n#include <cstdio>\n"
             "#include <cstdlib>\n#include <cstring>\n#include <random>\n#include <set>\n#include <string>\n#include "
             "<vector>\n\n";
        o << detail::selfTestSupportC();
        o << "\n/* Pipeline inputs, then outputs; an output's tolerance is its producing problem's (the floor of the "
             "harness's\n   end-to-end tolerance, kernels/HARNESS.md \"Pipelines\"). */\n";
        o << "static const TensorInfo kTensors[] = {\n";
        for (const auto& t : c.tensors) {
            Tolerance tol;
            if (t.output)
                for (const auto& po : p.outputs)
                    if (po.name == t.name)
                        tol = outputTolerance(p, po);
            o << "    {\"" << t.name << "\", " << detail::selfTestKind(t.spec->dtype) << ", "
              << (t.output ? "true" : "false") << ", " << (t.written && !t.output ? "true" : "false") << ", "
              << detail::cDouble(t.spec->scale) << ", " << detail::cDouble(tol.relL2) << ", "
              << detail::cDouble(tol.maxAbs) << "},\n";
        }
        o << "};\nstatic const int kNumTensors = " << c.tensors.size() << ";\n\n";
        o << "/* Integer inputs per shape (problem.json \"values\" of the stage that reads them first, evaluated at "
             "export):\n   kind, low, high, padding fraction, row length. */\n";
        o << "struct IntSpec {\n    int kind;\n    double lo, hi, pad, row;\n};\n";
        o << "struct TestShape {\n    long long dims[" << nd << "];\n    const char* label;\n    IntSpec ints["
          << std::max<std::size_t>(c.tensors.size(), 1) << "];\n};\n\n";
        o << "static const TestShape kShapes[] = {\n";
        for (const Shape& s : shapes) {
            o << "    {{";
            for (std::size_t d = 0; d < c.dims.size(); ++d)
                o << (d ? ", " : "") << s.dims.at(c.dims[d]->name) << "LL";
            if (c.dims.empty())
                o << "0";
            o << "}, \"" << freeLabel(p, s) << "\", {";
            for (std::size_t t = 0; t < c.tensors.size(); ++t) {
                const auto& x = c.tensors[t];
                const IntValues& v = x.spec->values;
                o << (t ? ", " : "");
                if (x.output || v.kind == IntValues::Kind::Any) {
                    o << "{0, 0, 0, 0, 0}";
                    continue;
                }
                const Bindings b = p.stages[static_cast<std::size_t>(x.describingStage)].shapeAt(s).bindings();
                const double row = x.spec->shape.empty() ? 0 : x.spec->shape.back().evaluate(b);
                o << "{" << static_cast<int>(v.kind) << ", " << detail::cDouble(v.low.evaluate(b)) << ", "
                  << detail::cDouble(v.high.evaluate(b)) << ", " << detail::cDouble(v.padFraction) << ", "
                  << detail::cDouble(row) << "}";
            }
            o << "}},\n";
        }
        o << "};\n\n";
        o << "static void setDims(" << c.dimsType() << "* d, const long long* v)\n{\n";
        for (std::size_t d = 0; d < c.dims.size(); ++d)
            o << "    d->" << cIdent(c.dims[d]->name) << " = v[" << d << "];\n";
        o << "    (void)d;\n    (void)v;\n}\n\n";
        std::string callArgs = "&d";
        for (std::size_t t = 0; t < c.tensors.size(); ++t)
            callArgs += ", b[" + std::to_string(t) + "]";
        callArgs += ", ws, wsBytes, s";
        o << "static int call(bool fallback, const " << c.dimsType()
          << "& d, const std::vector<void*>& b, void* ws, size_t wsBytes, cudaStream_t s)\n{\n"
          << "    return fallback ? " << P << "_run_fallback(" << callArgs << ") : " << P << "_run(" << callArgs
          << ");\n}\n\n";
        o << "int main()\n{\n";
        o << "    if (!haveDevice())\n        return 77;\n";
        o << "    if (" << P << "_init() != 0) {\n        std::printf(\"FAIL: init\\n\");\n        return 1;\n    }\n";
        o << "    for (int i = 0; i < " << P << "_stage_count(); ++i)\n        std::printf(\"stage %-10s %s\\n\", " << P
          << "_stage_name(i), " << P
          << "_stage_has_candidate(i) ? \"exported candidate (its dispatcher)\" : \"fallback\");\n";
        o << R"(    std::mt19937_64 rng(selfTestSeed());
    const double maxBytes = selfTestMaxBytes(4096.0 * (1 << 20));
    cudaStream_t stream;
    KL_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t ev[3];
    for (auto& e : ev)
        KL_CHECK(cudaEventCreate(&e));
    int failures = 0, checked = 0, skipped = 0;
    for (const TestShape& shape : kShapes) {
)";
        o << "        " << c.dimsType() << " d;\n        setDims(&d, shape.dims);\n";
        o << "        const size_t wsBytes = " << P << "_workspace_bytes(&d);\n";
        o << R"(        std::vector<size_t> numel(kNumTensors, 1);
        double bytes = (double)wsBytes;
        bool extentsOk = wsBytes != (size_t)-1;
        for (int t = 0; t < kNumTensors; ++t) {
            long long ext[8];
)";
        o << "            const int rank = " << P << "_tensor_extents(&d, t, ext);\n";
        o << R"(            extentsOk = extentsOk && rank >= 0;
            for (int a = 0; a < rank; ++a)
                numel[t] *= (size_t)ext[a];
            bytes += (double)numel[t] * (double)kindBytes(kTensors[t].kind);
        }
        if (!extentsOk || bytes > maxBytes) {
            std::printf("skip  %-28s (%s)\n", shape.label, extentsOk ? "over KL_SELFTEST_MAX_BYTES" : "no size");
            ++skipped;
            continue;
        }
        Tensors tensors(kTensors, kNumTensors, numel, [&](int t, size_t n) {
            const IntSpec& is = shape.ints[t];
            return is.kind != 0 ? klIntValues(is.kind, is.lo, is.hi, is.pad, is.row, n, rng) : randomValues(kTensors[t], n, rng);
        });
        const std::vector<void*>& buf = tensors.buf;
        void* ws = nullptr;
        if (wsBytes)
            KL_CHECK(cudaMalloc(&ws, wsBytes));
        std::printf("shape %s\n", shape.label);
        tensors.reset(stream);
        int rc = call(true, d, buf, ws, wsBytes, stream);
        KL_CHECK(cudaStreamSynchronize(stream));
        bool ok = rc == 0;
        if (rc != 0)
)";
        o << "            std::printf(\"      all-fallback pipeline failed: %d (%s)\\n\", rc, " << P
          << "_error_string(rc));\n";
        o << R"(        tensors.keepReference();
        tensors.reset(stream);
        rc = call(false, d, buf, ws, wsBytes, stream);
        KL_CHECK(cudaStreamSynchronize(stream));
        if (rc != 0)
)";
        o << "            std::printf(\"      pipeline failed: %d (%s)\\n\", rc, " << P << "_error_string(rc));\n";
        o << R"(        ok = ok && rc == 0 && tensors.check("pipeline");
        cudaGraphExec_t exec[2] = {nullptr, nullptr};
        for (int g = 0; ok && g < 2; ++g) {
            /* g 0: the pipeline, g 1: the all-fallback pipeline, each captured whole into one CUDA graph. */
            tensors.reset(stream);
            cudaGraph_t graph;
            KL_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            rc = call(g == 1, d, buf, ws, wsBytes, stream);
            KL_CHECK(cudaStreamEndCapture(stream, &graph));
            KL_CHECK(cudaGraphInstantiate(&exec[g], graph, 0));
            KL_CHECK(cudaGraphDestroy(graph));
            KL_CHECK(cudaGraphLaunch(exec[g], stream));
            KL_CHECK(cudaStreamSynchronize(stream));
            const bool gok = rc == 0 && tensors.check(g == 0 ? "graph" : "fb-graph");
            if (g == 0)
                std::printf("      CUDA graph capture + replay of the whole pipeline: %s\n", gok ? "ok" : "FAIL");
            ok = ok && gok;
        }
        if (ok) {
            /* The two graphs interleaved; inputs updated in place drift, the time does not. */
            double a = 0, b = 0;
            timeInterleaved([&] { KL_CHECK(cudaGraphLaunch(exec[0], stream)); }, [&] { KL_CHECK(cudaGraphLaunch(exec[1], stream)); },
                            stream, ev, &a, &b);
            std::printf("      time (graph): pipeline %.2f us, all-fallback %.2f us, speedup %.2fx (median of 25, warm caches)\n", a, b, b / a);
        }
        for (auto* e : exec)
            if (e)
                KL_CHECK(cudaGraphExecDestroy(e));
        if (!ok) {
            ++failures;
            std::printf("      FAIL\n");
        }
        ++checked;
        if (ws)
            KL_CHECK(cudaFree(ws));
    }
    std::printf("verified %d pipeline shapes (%d skipped), %d failed\n", checked, skipped, failures);
    const bool pass = failures == 0 && checked > 0;
    std::printf("%s\n", pass ? "PIPELINE SELFTEST PASSED" : "PIPELINE SELFTEST FAILED");
    return pass ? 0 : 1;
}
)";
        return o.str();
    }

    std::string genTorchOp(const PipelineC& c)
    {
        const Pipeline& p = *c.p;
        const std::string& P = c.P;
        std::ostringstream o;
        o << "/* " << P << "_op.cpp: the whole pipeline " << p.name << " as PyTorch ops torch.ops." << P
          << ".run and run_fallback.\n"
             " * Outputs and the workspace (intermediates included) come from PyTorch's caching allocator; the op "
             "launches\n * every stage on PyTorch's current stream, so torch.cuda.graphs can capture it. */\n";
        o << "#include <ATen/ATen.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAGuard.h>\n#include "
             "<torch/library.h>\n\n#include <vector>\n\n#include \""
          << P << ".h\"\n\nnamespace {\n\n";
        std::string sig, schema, fwd;
        char alias = 'a';
        for (const auto& t : c.tensors) {
            if (t.output)
                continue;
            sig += (sig.empty() ? "" : ", ") + std::string("const at::Tensor& ") + cIdent(t.name);
            schema += (schema.empty() ? "" : ", ")
                + (t.written ? std::string("Tensor(") + alias++ + "!) " : std::string("Tensor ")) + cIdent(t.name);
            fwd += ", " + cIdent(t.name);
        }
        for (const auto* d : c.dims) {
            sig += ", int64_t " + cIdent(d->name);
            schema += ", int " + cIdent(d->name);
            fwd += ", " + cIdent(d->name);
        }
        std::size_t outputs = 0;
        for (const auto& t : c.tensors)
            outputs += t.output ? 1 : 0;
        const std::string ret = outputs == 1 ? "at::Tensor" : "std::vector<at::Tensor>";
        const std::string schemaRet = outputs == 1 ? "Tensor" : "Tensor[]";
        o << ret << " call(bool fallback, " << sig << ")\n{\n";
        o << "    " << c.dimsType() << " dims;\n";
        for (const auto* d : c.dims)
            o << "    dims." << cIdent(d->name) << " = " << cIdent(d->name) << ";\n";
        o << "    const char* why = \"\";\n    TORCH_CHECK(" << P << "_valid(&dims, &why), \"" << P
          << ": \", why);\n    long long ext[8];\n";
        std::string first;
        for (std::size_t i = 0; i < c.tensors.size(); ++i) {
            const auto& t = c.tensors[i];
            if (t.output)
                continue;
            const std::string v = cIdent(t.name);
            if (first.empty())
                first = v;
            o << "    TORCH_CHECK(" << v << ".is_cuda() && " << v << ".is_contiguous() && " << v
              << ".scalar_type() == " << detail::torchScalarType(t.spec->dtype) << ", \"" << P << ": " << t.name
              << " must be a contiguous CUDA " << dtypeName(t.spec->dtype) << " tensor\");\n";
            o << "    {\n        const int rank = " << P << "_tensor_extents(&dims, " << i
              << ", ext);\n        int64_t n = 1;\n        for (int a = 0; a < rank; ++a)\n            n *= ext[a];\n"
              << "        TORCH_CHECK(rank >= 0 && " << v << ".numel() == n, \"" << P << ": " << t.name << " has \", "
              << v << ".numel(), \" elements, the dims need \", n);\n    }\n";
        }
        o << "    const c10::cuda::CUDAGuard guard(" << first << ".device());\n";
        std::vector<std::string> outs;
        for (std::size_t i = 0; i < c.tensors.size(); ++i) {
            const auto& t = c.tensors[i];
            if (!t.output)
                continue;
            const std::string v = cIdent(t.name);
            o << "    const int rank_" << v << " = " << P << "_tensor_extents(&dims, " << i << ", ext);\n";
            o << "    TORCH_CHECK(rank_" << v << " >= 0, \"" << P << ": no extents for " << t.name << "\");\n";
            o << "    at::Tensor " << v << " = at::empty(std::vector<int64_t>(ext, ext + rank_" << v << "), " << first
              << ".options().dtype(" << detail::torchScalarType(t.spec->dtype) << "));\n";
            outs.push_back(v);
        }
        o << "    const size_t ws_bytes = " << P << "_workspace_bytes(&dims);\n";
        o << "    TORCH_CHECK(ws_bytes != (size_t)-1, \"" << P << ": no workspace size for these dims\");\n";
        o << "    at::Tensor ws = at::empty({(int64_t)(ws_bytes ? ws_bytes : 1)}, " << first
          << ".options().dtype(at::kByte));\n";
        std::string cargs = "&dims";
        for (const auto& t : c.tensors)
            cargs += ", " + cIdent(t.name) + ".data_ptr()";
        cargs += ", ws.data_ptr(), ws_bytes, at::cuda::getCurrentCUDAStream()";
        o << "    const int rc = fallback ? " << P << "_run_fallback(" << cargs
          << ")\n                            : " << P << "_run(" << cargs << ");\n";
        o << "    TORCH_CHECK(rc == 0, \"" << P << ": \", " << P << "_error_string(rc));\n";
        if (outs.size() == 1) {
            o << "    return " << outs[0] << ";\n}\n\n";
        } else {
            o << "    return {";
            for (std::size_t i = 0; i < outs.size(); ++i)
                o << (i ? ", " : "") << outs[i];
            o << "};\n}\n\n";
        }
        o << ret << " op_run(" << sig << ") { return call(false" << fwd << "); }\n";
        o << ret << " op_run_fallback(" << sig << ") { return call(true" << fwd << "); }\n\n} // namespace\n\n";
        o << "TORCH_LIBRARY(" << P << ", m)\n{\n";
        for (const char* fn : { "run", "run_fallback" })
            o << "    m.def(\"" << fn << "(" << schema << ") -> " << schemaRet << "\");\n";
        o << "}\n\nTORCH_LIBRARY_IMPL(" << P << ", CUDA, m)\n{\n    m.impl(\"run\", &op_run);\n"
          << "    m.impl(\"run_fallback\", &op_run_fallback);\n}\n";
        return o.str();
    }

    std::string genTorchLoader(const PipelineC& c)
    {
        const std::string& P = c.P;
        std::ostringstream o;
        o << "\"\"\"Loads the exported pipeline " << c.p->name << " as PyTorch ops.\n\n    import " << P
          << "\n    ops = " << P << ".load(\"build/lib" << P
          << "_torch.so\")  # cmake -DKL_BUILD_TORCH=ON builds it\n    out = ops.run(";
        std::string sep;
        for (const auto& t : c.tensors)
            if (!t.output) {
                o << sep << t.name;
                sep = ", ";
            }
        for (const auto* d : c.dims)
            o << sep << d->name;
        o << ")\n\nor set " << c.U << "_TORCH_LIBRARY.\n\"\"\"\nimport os\n\nimport torch\n\n_ops = None\n\n\n";
        o << "def load(library=None):\n    \"\"\"Registers torch.ops." << P << " and returns it.\"\"\"\n"
          << "    global _ops\n    if _ops is None:\n        torch.ops.load_library(library or os.environ[\"" << c.U
          << "_TORCH_LIBRARY\"])\n        _ops = torch.ops." << P << "\n    return _ops\n";
        return o.str();
    }

    std::string genCMake(const PipelineC& c)
    {
        const std::string& P = c.P;
        std::ostringstream o;
        o << "# The exported pipeline " << c.p->name << " (lib" << P
          << ") over one bundle per stage, each stage's own tests and the\n# pipeline's GPU self-test:\n"
             "#   cmake -S . -B build && cmake --build build && ctest --test-dir build --output-on-failure\n";
        o << "cmake_minimum_required(VERSION 3.24)\n";
        o << detail::cudaArchCMake(c.plan->cudaArch) << "project(" << P << " LANGUAGES C CXX CUDA)\n\n";
        o << "option(KL_BUILD_TORCH \"Build the PyTorch op library (needs torch in the Python on PATH)\" OFF)\n";
        o << "find_package(CUDAToolkit REQUIRED)\nenable_testing()\n";
        std::string libs;
        for (const auto& e : c.plan->stages) {
            o << "add_subdirectory(" << e.stage << ")\n";
            libs += " " + e.prefix;
        }
        o << "\nadd_library(" << P << " src/" << P << ".c)\n";
        o << "set_target_properties(" << P << " PROPERTIES POSITION_INDEPENDENT_CODE ON)\n";
        o << "target_include_directories(" << P << " PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include PRIVATE "
          << "${CMAKE_CURRENT_SOURCE_DIR}/src)\n";
        o << "target_link_libraries(" << P << " PUBLIC" << libs << " CUDA::cudart)\n";
        o << "if(UNIX)\n  target_link_libraries(" << P << " PRIVATE m)\nendif()\n\n";
        o << "add_executable(" << P << "_selftest test/pipeline_selftest.cu)\n";
        o << "set_target_properties(" << P << "_selftest PROPERTIES CUDA_STANDARD 17)\n";
        o << "target_link_libraries(" << P << "_selftest PRIVATE " << P << ")\n";
        o << "add_test(NAME pipeline_selftest COMMAND " << P << "_selftest)\n";
        o << "set_tests_properties(pipeline_selftest PROPERTIES SKIP_RETURN_CODE 77)\n\n";
        o << detail::torchCMake(P);
        return o.str();
    }

    std::string genReadme(const PipelineC& c)
    {
        const Pipeline& p = *c.p;
        const std::string& P = c.P;
        std::ostringstream o;
        o << "# Pipeline " << p.name << "\n\n" << p.description << "\n\n";
        if (!c.plan->refusals.empty()) {
            o << "> **FORCED EXPORT.** KernelLoop refused some stage's candidate; exported with --force:\n";
            for (const auto& r : c.plan->refusals)
                o << "> - " << r.code << ": " << r.message << "\n";
            o << "\n";
        }
        o << "| stage | problem | kernel | bundle |\n|---|---|---|---|\n";
        for (std::size_t i = 0; i < p.stages.size(); ++i) {
            const auto& e = c.plan->stages[i];
            o << "| " << e.stage << " | " << p.stages[i].problemName << " | "
              << (e.hasCandidate() ? "candidate " + e.plan.candidateId + " of session " + e.session->id
                             + " (its dispatcher: the fallback outside its verified-and-faster boxes)"
                                   : "fallback: " + e.plan.fallbackDescription)
              << " | `" << e.stage << "/` |\n";
        }
        o << "\n`include/" << P << ".h` runs the stages in order on the wired tensors (`" << P << "_run`); `" << P
          << "_run_fallback` runs every stage on its fallback. The intermediates and the stages' workspace come "
             "from one caller-allocated workspace (`"
          << P
          << "_workspace_bytes`), so a call allocates nothing and the whole pipeline captures into one CUDA "
             "graph. `torch/"
          << P << "_op.cpp`: `torch.ops." << P << ".run` / `run_fallback`.\n\n";
        o << "```sh\ncmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j && ctest --test-dir "
             "build --output-on-failure\n```\n\n";
        o << "`ctest` runs each candidate stage's dispatch test and self-test and `pipeline_selftest`: the pipeline "
             "against the all-fallback pipeline on fresh random inputs (eager and from one CUDA graph), each output "
             "within its producing problem's tolerance. `manifest.json` names each stage's source.\n";
        return o.str();
    }

    Json stageManifest(const Pipeline& p, std::size_t i, const PipelineStageExport& e)
    {
        const PipelineStage& st = p.stages[i];
        Json dims = Json::object();
        for (const auto& [d, x] : st.dims)
            dims[d] = x.text();
        Json inputs = Json::object();
        for (const auto& [t, s] : st.inputs)
            inputs[t] = s.text();
        Json scalars = Json::object(); // what the entry point passes: a value, or a formula over the stage's dims
        for (const auto& x : st.problem.scalars)
            scalars[x.name] = x.formula ? Json(x.formula->text()) : Json(x.value);
        Json j { { "name", st.name }, { "problem", st.problemName }, { "dims", dims }, { "inputs", inputs },
            { "scalars", scalars }, { "pipeline_impl", st.impl.describe() }, { "bundle", st.name + "/" },
            { "prefix", e.prefix }, { "origin", e.origin }, { "fallback", e.plan.fallbackDescription } };
        if (!e.hasCandidate()) {
            j["source"] = "fallback";
            return j;
        }
        const Session& s = *e.session;
        const Candidate& c = s.tree.at(e.plan.candidateId);
        j["source"] = "candidate";
        j["session"] = { { "id", s.id }, { "directory", e.sessionName } };
        j["candidate"] = { { "id", c.id }, { "status", statusName(c.status) }, { "author", authorName(c.author) },
            { "source_sha256", sha256Hex(c.source) }, { "params", c.params } };
        j["manifest"] = st.name + "/manifest.json";
        j["refusals"] = refusalsJson(e.plan.refusals);
        j["candidate_regions"] = Json::array();
        for (const auto& r : e.plan.dispatch.candidateRegions)
            j["candidate_regions"].push_back(r.label(e.plan.dispatch.dims));
        if (const auto ev = s.evaluations.find(c.id); ev != s.evaluations.end()) {
            j["objective"] = { { "kind", s.settings.objective }, { "value", ev->second.objective },
                { "ci95", { ev->second.objectiveCiLow, ev->second.objectiveCiHigh } } };
            Json shapes = Json::array();
            std::size_t correct = 0, held = 0;
            for (const ShapeResult& r : ev->second.shapes) {
                correct += r.correct ? 1 : 0;
                held += r.heldOut && r.correct ? 1 : 0;
                Json sj { { "shape", r.shape.label() }, { "correct", r.correct }, { "held_out", r.heldOut } };
                if (r.timing)
                    sj["speedup"] = { { "median", r.speedup }, { "ci95", { r.speedupCiLow, r.speedupCiHigh } } };
                shapes.push_back(std::move(sj));
            }
            j["verification"]
                = { { "verdict", verdictName(ev->second.verdict) }, { "shapes_verified", ev->second.shapes.size() },
                      { "shapes_correct", correct }, { "held_out_correct", held }, { "shapes", shapes } };
        }
        return j;
    }

} // namespace

PipelineStageSource parseStageSource(const std::string& text)
{
    PipelineStageSource s;
    s.flag = "--stage " + text;
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
        throw InputError(s.flag + ": expected STAGE=SESSION[:CANDIDATE]");
    s.stage = text.substr(0, eq);
    std::string session = text.substr(eq + 1);
    const auto colon = session.rfind(':');
    if (colon != std::string::npos && colon > 0 && isSafeId(session.substr(colon + 1))
        && session.find('/', colon) == std::string::npos) {
        s.candidate = session.substr(colon + 1);
        session.resize(colon);
    }
    s.session = session;
    return s;
}

PipelineExportPlan planPipelineExport(
    const Pipeline& p, const std::vector<PipelineStageSource>& overrides, double minSpeedup)
{
    PipelineExportPlan plan;
    plan.prefix = lowerOf("kl_" + cIdent(p.name));
    std::map<std::string, const PipelineStageSource*> byStage;
    for (const auto& o : overrides) {
        if (p.stageIndex(o.stage) < 0)
            throw InputError(o.flag + ": pipeline " + p.name + " has no stage '" + abbreviate(o.stage)
                + "' (stages: " + stagesList(p) + ")");
        if (!byStage.emplace(o.stage, &o).second)
            throw InputError(o.flag + ": stage " + o.stage + " is given twice");
    }
    bool haveDevice = false;
    for (std::size_t i = 0; i < p.stages.size(); ++i) {
        const PipelineStage& st = p.stages[i];
        PipelineStageExport e;
        e.stage = st.name;
        e.prefix = plan.prefix + "_" + lowerOf(cIdent(st.name));
        if (const auto it = byStage.find(st.name); it != byStage.end()) {
            planCandidateStage(e, st, it->second->session, it->second->candidate, it->second->flag, minSpeedup);
            // The session by its directory's name: a bundle carries no path of this machine.
            e.origin = "--stage " + st.name + "=" + e.sessionName
                + (it->second->candidate.empty() ? "" : ":" + it->second->candidate);
        } else if (st.impl.kind == StageImpl::Kind::Candidate) {
            fs::path dir = st.impl.session;
            if (dir.is_relative() && !p.folder.empty())
                dir = fs::path(p.folder) / dir;
            e.origin = "pipeline.json stages[" + std::to_string(i) + "].impl";
            planCandidateStage(e, st, dir, st.impl.candidate,
                p.folder + "/pipeline.json stages[" + std::to_string(i) + "] (" + st.name + ").impl", minSpeedup);
        } else {
            e.origin = "pipeline.json runs the " + std::string(stageImplKindName(st.impl.kind))
                + " and no --stage names a session";
            e.plan = planFallbackExport(st.problem, e.prefix);
        }
        for (const auto& r : e.plan.refusals)
            plan.refusals.push_back({ r.code, "stage " + st.name + " (" + e.origin + "): " + r.message });
        for (const auto& w : e.plan.warnings)
            plan.warnings.push_back("stage " + st.name + ": " + w);
        if (e.hasCandidate() && !haveDevice) {
            plan.device = e.session->device;
            haveDevice = true;
        }
        plan.stages.push_back(std::move(e));
    }
    plan.cudaArch = bundleCudaArch(plan.device, plan.warnings);
    return plan;
}

std::map<std::string, std::string> generatePipelineExport(
    const Pipeline& p, const PipelineExportPlan& plan, const ExportOptions& options)
{
    std::map<std::string, std::string> files;
    for (std::size_t i = 0; i < p.stages.size(); ++i) {
        const PipelineStageExport& e = plan.stages[i];
        const Problem& problem = p.stages[i].problem;
        auto part = e.hasCandidate() ? generateBundleFor(*e.session, problem, e.plan, !e.plan.refusals.empty(), options)
                                     : generateFallbackBundleFor(problem, e.plan, plan.device, options);
        for (auto& [path, content] : part)
            files[e.stage + "/" + path] = std::move(content);
    }
    const PipelineC c = describe(p, plan);
    const std::string& P = plan.prefix;
    files["include/" + P + ".h"] = genHeader(c);
    files["src/" + P + ".c"] = genEntryPoint(c);
    files["src/kl_expr.h"] = "#ifndef KL_EXPR_H\n#define KL_EXPR_H\n" + expressionRuntimeC() + "#endif\n";
    files["test/pipeline_selftest.cu"] = genSelfTest(c);
    files["torch/" + P + "_op.cpp"] = genTorchOp(c);
    files["torch/" + P + ".py"] = genTorchLoader(c);
    files["CMakeLists.txt"] = genCMake(c);
    files["README.md"] = genReadme(c);

    Json m;
    m["format"] = "kernelloop-export/1";
    m["kind"] = "pipeline";
    m["pipeline"] = p.name;
    m["description"] = p.description;
    m["forced"] = !plan.refusals.empty();
    m["refusals"] = refusalsJson(plan.refusals);
    m["warnings"] = plan.warnings;
    m["prefix"] = P;
    m["dims"] = Json::array();
    m["constants"] = Json::object();
    for (const auto& d : p.space.dims) {
        if (d.constant)
            m["constants"][d.name] = d.min;
        else
            m["dims"].push_back({ { "name", d.name }, { "min", d.min }, { "max", d.max } });
    }
    m["tensors"] = Json::array();
    for (const auto& t : c.tensors) {
        const char* role = t.output ? "output" : t.written ? "inout" : "input";
        m["tensors"].push_back({ { "name", t.name }, { "dtype", dtypeName(t.spec->dtype) }, { "role", role },
            { "scale", t.spec->scale }, { "from", t.output ? Json(t.source.text()) : Json() } });
    }
    m["intermediates"] = Json::array();
    for (const auto& im : c.intermediates)
        m["intermediates"].push_back({ { "name", im.source.text() }, { "dtype", dtypeName(im.spec->dtype) } });
    m["intermediates_allocated_by"]
        = "the caller: one workspace of " + P + "_workspace_bytes() holds them and the stages' workspace";
    m["stages"] = Json::array();
    for (std::size_t i = 0; i < p.stages.size(); ++i)
        m["stages"].push_back(stageManifest(p, i, plan.stages[i]));
    m["end_to_end_tolerance"] = Json::object();
    for (const auto& o : p.outputs) {
        const Tolerance t = outputTolerance(p, o);
        m["end_to_end_tolerance"][o.name] = { { "rel_l2", t.relL2 }, { "max_abs", t.maxAbs },
            { "rule",
                "the producing problem's tolerance (" + o.source.stage + ": " + p.stage(o.source.stage)->problemName
                    + "), the floor of the harness's end-to-end tolerance; against the all-fallback pipeline" } };
    }
    m["self_test_shapes"] = Json::array();
    for (const Shape& s : selfTestShapes(p)) {
        Json extents = Json::object();
        for (const auto& t : c.tensors)
            extents[t.name] = p.extentsAt(t.source, s);
        m["self_test_shapes"].push_back({ { "label", freeLabel(p, s) }, { "extents", extents } });
    }
    m["entry_point"] = "include/" + P + ".h";
    Json hashes = Json::object();
    for (const auto& [path, content] : files)
        hashes[path] = sha256Hex(content);
    m["files"] = hashes;
    files["manifest.json"] = m.dump(2) + "\n";
    return files;
}

PipelineExportResult exportPipeline(
    const Pipeline& p, const std::vector<PipelineStageSource>& overrides, const ExportOptions& options)
{
    if (options.outDir.empty())
        throw InputError("export: no output directory (--out DIR)");
    PipelineExportResult result;
    result.plan = planPipelineExport(p, overrides, options.minSpeedup);
    refuseUnlessForced(
        "pipeline " + p.name, result.plan.refusals, options.force, "manifest.json, each stage's bundle and README.md");
    result.forced = !result.plan.refusals.empty();
    const auto files = generatePipelineExport(p, result.plan, options);
    // The leak scan and the atomic swap of writeExport; its problem folder is the pipeline's (each stage's part was
    // already scrubbed of its own problem's folder).
    Problem scope;
    scope.name = p.name;
    scope.folder = p.folder;
    result.outDir = writeExport(files, scope, options);
    for (const auto& [path, content] : files)
        result.files.push_back(path);
    return result;
}

} // namespace kl::exporter
