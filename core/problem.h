#pragma once
// A problem is data: a folder with problem.json, a trusted reference, a naive baseline and a tunable
// template (kernels/problems/<name>/). This is its in-memory form; parsing lives in problem_json.cpp.
#include "core/expr.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kl {

enum class DType { F32, F16, BF16, F64, I32, I64, U8, FP8E4M3 };
const char* dtypeName(DType t);
std::optional<DType> dtypeFromName(const std::string& name);
std::size_t dtypeBytes(DType t);

// InOut: read and written in place (vLLM's fused_add_rms_norm writes the norm into x and updates residual): the
// harness fills it like an input before every launch and judges it like an output; it is not hashed as an unchanged
// input (kernels/HARNESS.md, "In-place tensors").
enum class TensorRole { Input, Output, InOut };
const char* tensorRoleName(TensorRole r); // "input", "output", "inout": problem.json's "role"
std::optional<TensorRole> tensorRoleFromName(const std::string& name);
// Whether a launch reads values the harness put there (inputs and in-out tensors).
inline bool readsInput(TensorRole r)
{
    return r != TensorRole::Output;
}
// Whether a launch's result is judged there (outputs and in-out tensors).
inline bool writesOutput(TensorRole r)
{
    return r != TensorRole::Input;
}

// The values of an integer input that means something (positions, indices, page tables, lengths), so that a
// kernel reading it indexes inside its tensors. Integers without a kind are rint(normal x scale).
struct IntValues {
    enum class Kind {
        Any, // rint(normal x scale), like any other input
        Range, // uniform in [low, high)
        Distinct, // per row (the last extent), distinct values in [0, high), in random order; padded with -1
                  // past high and, in a padFraction share of rows, after a random prefix (top-k selections)
        Permutation, // the whole tensor is a permutation of [0, its element count) (page tables)
        Lengths, // uniform in [low, high], high and low each present at least once (ragged batches)
    };
    Kind kind = Kind::Any;
    Expr low = Expr::parse("0");
    Expr high = Expr::parse("0");
    double padFraction = 0;
};
const char* intValuesKindName(IntValues::Kind k);
std::optional<IntValues::Kind> intValuesKindFromName(const std::string& name);

// How verification fills an input: several distributions run on every check.
struct TensorSpec {
    std::string name;
    DType dtype = DType::F32;
    std::vector<Expr> shape; // expressions over dims
    TensorRole role = TensorRole::Input;
    double scale = 1.0; // typical magnitude of values; the "large" distribution multiplies it
    IntValues values {}; // integer inputs only
    // The magnitude under the "large" check, where 1000 x scale makes the problem ill-conditioned (attention: large
    // values, but query scaled down so the logits stay as they are); 0: 1000 x scale.
    double largeScale = 0;
};

struct ScalarSpec {
    std::string name;
    DType dtype = DType::F32; // F32 or I32
    double value = 0; // when there is no formula
    std::optional<Expr> formula; // a value computed from dims (softmax scale 1/sqrt(D + R))
    double valueAt(const Bindings& dims) const; // throws ExprError
};

struct DimSpec {
    std::string name;
    std::int64_t min = 1;
    std::int64_t max = 1;
    std::int64_t multipleOf = 1;
    bool logUniform = true; // draw held-out values log-uniformly (shapes span orders of magnitude)
    bool constant = false; // problem.json "constants": a fixed size (head_dim 128), min == max, in every shape
};

// One concrete shape: dim name -> value, with a weight for the workload objective.
struct Shape {
    std::map<std::string, std::int64_t> dims;
    double weight = 1.0;
    std::string label() const; // "T=4096,H=8192"
    Bindings bindings() const;
    bool operator==(const Shape& o) const { return dims == o.dims; }
    bool operator<(const Shape& o) const { return dims < o.dims; }
};

// problem.json "trace_match": how an operation in a profiler trace is recognised as this problem (rules are data, per
// problem). A rule names an nn.Module class by suffix ("RMSNorm" matches LlamaRMSNorm) or a framework op by name
// ("aten::silu"); the op whose recorded inputs give the shape (a module's first op with inputs when empty); an op
// right after it that the problem fuses (silu_and_mul: the aten::mul after aten::silu); a condition; and each dim as
// an expression over the inputs' sizes: in0_0 .. in0_7 (axes), in0_rank, in0_rows (all axes but the last
// multiplied), in0_last.
struct TraceMatchRule {
    std::string module;
    std::string op;
    std::string shapeOp;
    std::string then;
    std::vector<std::string> dtypes; // input 0's recorded type is one of these ("c10::BFloat16"); empty: any
    std::optional<Expr> when;
    std::map<std::string, Expr> dims;
    std::string describe() const; // "module *RMSNorm", "op aten::silu (+ aten::mul)"
};
// Whether name is a variable a trace-match expression may use (in3_0, in0_rows, ...).
bool isTraceInputVariable(const std::string& name);

// problem.json "regimes": named parts of the validity range that a session tunes separately (decode: "T <= 256",
// prefill: "T > 256"), each with its own best candidate and its own entry in an exported dispatcher. Every shape of
// the range lies in exactly one regime; a problem without regimes is one regime, the whole range.
struct Regime {
    std::string name; // isRegimeName: it names the regime's part of an exported bundle
    Expr condition; // over dims
    bool contains(const Shape& s) const { return condition.evaluateBool(s.bindings()); } // throws ExprError
};

// A regime's name: lower-case letters, digits and _, a letter first, at most 32 (a C identifier in bundles).
bool isRegimeName(const std::string& name);

struct Tolerance {
    double relL2 = 1e-2;
    double maxAbs = 1e-1;
};

struct Problem {
    std::string name;
    std::string description;
    std::vector<std::string> tags; // e.g. "normalization", "deepseek-mla": selects context/ files
    std::vector<DimSpec> dims;
    std::vector<Expr> dimConstraints; // e.g. "H % 8 == 0"
    std::vector<ScalarSpec> scalars;
    std::vector<TensorSpec> tensors; // in the order kernels name them
    std::vector<Shape> tuningShapes; // shown to agents; timed
    std::string tuningShapesFrom; // problem.json "tuning_shapes_from": the trace they were taken from, if any
    std::vector<Shape> verifyShapes; // fixed verification shapes, extremes included
    std::map<DType, Tolerance> tolerances; // by output dtype
    Expr flops; // floating-point operations for one call
    Expr bytes; // fewest bytes moved: each input read once, each output written once
    std::string referenceFile = "reference.cu";
    std::string baselineFile = "baseline.cu";
    std::string templateFile = "template.cu";
    // problem.json "arch_templates" ({"sm_90a": "template_sm90.cu"}): templates that need a newer architecture than
    // min_arch; on a device of at least that architecture the newest of them replaces templateFile.
    std::map<int, std::string> archTemplates;
    std::string tritonTemplateFile; // problem.json "triton_template": the Triton alternative (--language triton)
    std::string libraryBaseline; // e.g. "cublas_gemm_bf16": the fallback an export dispatches to
    std::vector<TraceMatchRule> traceMatch;
    std::vector<Regime> regimes {};
    int minArch = 0; // problem.json "min_arch" ("sm_80"): the oldest architecture it supports, x10; 0: any
    std::string folder; // where it was loaded from (not serialized into sessions)

    const TensorSpec* tensor(const std::string& n) const;
    const DimSpec* dim(const std::string& n) const;
    const ScalarSpec* scalar(const std::string& n) const;
    // s with every constant the problem declares and s lacks (shapes written by people name only the free dims).
    Shape withConstants(Shape s) const;
    bool shapeIsValid(const Shape& s, std::string* why = nullptr) const;
    // The indices of the regimes whose condition holds at s: one for a shape of a well-formed problem. Throws
    // ExprError when a condition cannot be evaluated there.
    std::vector<std::size_t> regimesOf(const Shape& s) const;
    Tolerance toleranceFor(DType t) const;
    bool supportsArch(int arch) const { return arch == 0 || arch >= minArch; } // 0: not known, not refused
    // Empty when the problem runs on arch, else why not, naming problem.json's "min_arch".
    std::string archRefusal(int arch) const;
    // The template for a device of arch (0: not known, the portable templateFile).
    const std::string& templateFor(int arch) const;
};

// A tensor larger than any device holds is a mistake in problem.json, not a workload.
constexpr double kMaxTensorElements = 1099511627776.0; // 2^40

// Why name cannot be a dim, scalar or tensor of p (not a variable name, or already taken), or nullopt.
std::optional<std::string> badProblemName(const Problem& p, const std::string& name, const char* kind);

// The checks on a parsed problem that span fields: unique names, shapes and formulas naming only dims and
// evaluating at every declared shape (no division by zero, no negative extent, no tensor above
// kMaxTensorElements), tolerances not negative, a tuning weight above zero. Throws InputError naming where's field.
void validateProblem(const Problem& p, const std::string& where);

// Where shapes break the regime partition ("sampled shape T=3,H=1024 is in no regime (regimes: decode, prefill)",
// "... is in both decode and prefill"), naming the first such shape of `what`; empty when each shape lies in exactly
// one regime or the problem declares none.
std::string regimePartitionError(const Problem& p, const std::vector<Shape>& shapes, const std::string& what);

// The values of an integer input with a kind (IntValues) at shape s: count elements, from seed, identical on every
// machine (the worker fills inputs with them; tests and bundles can regenerate them). Throws ExprError.
std::vector<std::int64_t> intInputValues(const TensorSpec& t, const Shape& s, std::uint64_t count, std::uint64_t seed);

} // namespace kl
