#include "core/pipeline.h"

#include "core/catalogue.h"
#include "core/errors.h"
#include "core/json_fields.h"
#include "core/session_store.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>
#include <utility>

namespace fs = std::filesystem;

namespace kl {

using namespace jsonfield;

namespace {
    constexpr std::pair<StageImpl::Kind, const char*> kImplKinds[] = {
        { StageImpl::Kind::Baseline, "baseline" },
        { StageImpl::Kind::Library, "library" },
        { StageImpl::Kind::Reference, "reference" },
        { StageImpl::Kind::Candidate, "candidate" },
    };

    std::string extentsText(const std::vector<std::int64_t>& e)
    {
        std::string s = "[";
        for (std::size_t i = 0; i < e.size(); ++i)
            s += (i ? ", " : "") + std::to_string(e[i]);
        return s + "]";
    }

    std::string names(const std::vector<std::string>& v)
    {
        std::string s;
        for (const auto& n : v)
            s += (s.empty() ? "" : ", ") + n;
        return s.empty() ? "none" : s;
    }

    // The tensor a source names and the stage whose problem declares it (for a pipeline input: its first reader).
    std::pair<const PipelineStage*, const TensorSpec*> describe(const Pipeline& p, const TensorSource& s)
    {
        if (!s.stage.empty()) {
            const PipelineStage* producer = p.stage(s.stage);
            const TensorSpec* t = producer ? producer->problem.tensor(s.tensor) : nullptr;
            if (!t || t->role != TensorRole::Output)
                return { producer, nullptr };
            return { producer, t };
        }
        for (const auto& st : p.stages)
            for (const auto& [input, source] : st.inputs)
                if (source == s)
                    return { &st, st.problem.tensor(input) };
        return { nullptr, nullptr };
    }

    std::vector<std::int64_t> extents(const TensorSpec& t, const Shape& stageShape)
    {
        const Bindings b = stageShape.bindings();
        std::vector<std::int64_t> e;
        for (const auto& x : t.shape)
            e.push_back(x.evaluateInt(b));
        return e;
    }

    StageImpl implFromJson(const Json& j, const std::string& where)
    {
        StageImpl impl;
        if (j.is_string()) {
            const std::string kind = j.get<std::string>();
            for (const auto& [k, n] : kImplKinds)
                if (kind == n && k != StageImpl::Kind::Candidate) {
                    impl.kind = k;
                    return impl;
                }
            throw InputError(where + ": '" + abbreviate(kind)
                + "' is not an implementation (\"baseline\", \"library\", \"reference\" or {\"session\": DIR, "
                  "\"candidate\": ID})");
        }
        if (!j.is_object())
            throw InputError(where
                + ": expected \"baseline\", \"library\", \"reference\" or {\"session\": DIR, "
                  "\"candidate\": ID}");
        impl.kind = StageImpl::Kind::Candidate;
        impl.session = string(j, "session", where);
        impl.candidate = string(j, "candidate", where);
        if (impl.session.empty())
            throw InputError(where + ".session: empty");
        if (!isSafeId(impl.candidate))
            throw InputError(where + ".candidate: '" + abbreviate(impl.candidate) + "' is not a candidate id");
        return impl;
    }

    Json implToJson(const StageImpl& impl)
    {
        if (impl.kind != StageImpl::Kind::Candidate)
            return stageImplKindName(impl.kind);
        return { { "session", impl.session }, { "candidate", impl.candidate } };
    }
} // namespace

const char* stageImplKindName(StageImpl::Kind k)
{
    for (const auto& [kind, name] : kImplKinds)
        if (kind == k)
            return name;
    return "baseline";
}

std::string StageImpl::describe() const
{
    if (kind == Kind::Candidate)
        return "candidate " + candidate + " of " + session;
    return stageImplKindName(kind);
}

std::string TensorSource::text() const
{
    return stage.empty() ? tensor : stage + "." + tensor;
}

TensorSource TensorSource::parse(const std::string& text)
{
    const std::size_t dot = text.find('.');
    if (dot == std::string::npos)
        return { "", text };
    return { text.substr(0, dot), text.substr(dot + 1) };
}

Shape PipelineStage::shapeAt(const Shape& pipelineShape) const
{
    const Bindings b = pipelineShape.bindings();
    Shape s;
    for (const auto& [dim, e] : dims)
        s.dims[dim] = e.evaluateInt(b);
    return problem.withConstants(std::move(s));
}

const PipelineStage* Pipeline::stage(const std::string& n) const
{
    const int i = stageIndex(n);
    return i < 0 ? nullptr : &stages[static_cast<std::size_t>(i)];
}

int Pipeline::stageIndex(const std::string& n) const
{
    for (std::size_t i = 0; i < stages.size(); ++i)
        if (stages[i].name == n)
            return static_cast<int>(i);
    return -1;
}

const TensorSpec* Pipeline::sourceSpec(const TensorSource& s) const
{
    return describe(*this, s).second;
}

const PipelineStage* Pipeline::describingStage(const TensorSource& s) const
{
    return describe(*this, s).first;
}

std::vector<std::int64_t> Pipeline::extentsAt(const TensorSource& s, const Shape& pipelineShape) const
{
    const auto [st, t] = describe(*this, s);
    if (!st || !t)
        throw ExprError("'" + s.text() + "' names no tensor of pipeline " + name);
    return extents(*t, st->shapeAt(pipelineShape));
}

Problem catalogueProblem(const std::string& name)
{
    return loadProblem(findProblemFolder(name).string());
}

void validatePipeline(const Pipeline& p, const std::string& where)
{
    std::set<std::string> stageNames;
    for (std::size_t i = 0; i < p.stages.size(); ++i) {
        const PipelineStage& st = p.stages[i];
        const std::string w = where + ".stages[" + std::to_string(i) + "]";
        if (!Expr::isVariableName(st.name))
            throw InputError(w + ".name: '" + abbreviate(st.name) + "' must be letters, digits and '_'");
        if (!stageNames.insert(st.name).second)
            throw InputError(w + ".name: a stage named '" + st.name + "' comes earlier");
        const Problem& prob = st.problem;
        // Each pipeline tensor has one producer and is read unchanged by every later stage; a stage that updates a
        // tensor in place would change what its other readers see, so such stages are refused, not half-supported.
        for (const auto& t : prob.tensors)
            if (t.role == TensorRole::InOut)
                throw InputError(w + ".problem: problem " + prob.name + " updates tensor '" + t.name
                    + "' in place (role inout); pipeline stages cannot be in-place: use its out-of-place form (e.g. "
                      "add_rmsnorm for fused_add_rmsnorm)");
        for (const auto& [dim, e] : st.dims) {
            if (!prob.dim(dim)) {
                std::vector<std::string> known;
                for (const auto& d : prob.dims)
                    known.push_back(d.name);
                throw InputError(w + ".dims." + abbreviate(dim) + ": not a dim of problem " + prob.name
                    + " (dims: " + names(known) + ")");
            }
            for (const auto& id : e.identifiers())
                if (!p.space.dim(id))
                    throw InputError(w + ".dims." + dim + ": '" + abbreviate(e.text()) + "' names '" + abbreviate(id)
                        + "', which is not a dim of the pipeline");
        }
        for (const auto& d : prob.dims)
            if (!d.constant && !st.dims.count(d.name))
                throw InputError(w + ".dims: dim " + d.name + " of problem " + prob.name + " is not mapped");
        for (const auto& [input, source] : st.inputs) {
            const std::string wi = w + ".inputs." + abbreviate(input);
            const TensorSpec* t = prob.tensor(input);
            if (!t)
                throw InputError(wi + ": problem " + prob.name + " has no tensor '" + abbreviate(input) + "'");
            if (t->role != TensorRole::Input)
                throw InputError(wi + ": '" + input + "' is an output of problem " + prob.name + ", not an input");
            if (source.stage.empty()) {
                if (std::find(p.inputs.begin(), p.inputs.end(), source.tensor) == p.inputs.end())
                    throw InputError(wi + ": '" + abbreviate(source.tensor) + "' is not a pipeline input (inputs: "
                        + names(p.inputs) + "; a stage output is written stage.tensor)");
                continue;
            }
            const int from = p.stageIndex(source.stage);
            if (from < 0)
                throw InputError(
                    wi + ": '" + abbreviate(source.text()) + "' names no stage '" + abbreviate(source.stage) + "'");
            if (from >= static_cast<int>(i))
                throw InputError(wi + ": '" + source.text() + "' comes from stage " + std::to_string(from) + " ("
                    + source.stage + "), which does not run before stage " + std::to_string(i)
                    + ": stages run in order, so this wiring is a cycle");
            if (!p.sourceSpec(source))
                throw InputError(wi + ": '" + abbreviate(source.text()) + "': problem "
                    + p.stages[static_cast<std::size_t>(from)].problemName + " of stage " + source.stage
                    + " has no output '" + abbreviate(source.tensor) + "'");
        }
        for (const auto& t : prob.tensors)
            if (t.role == TensorRole::Input && !st.inputs.count(t.name))
                throw InputError(w + ".inputs: input '" + t.name + "' of problem " + prob.name + " is not wired");
        for (const auto& [input, source] : st.inputs) {
            const TensorSpec* have = p.sourceSpec(source);
            const TensorSpec* want = prob.tensor(input);
            if (have->dtype != want->dtype)
                throw InputError(w + ".inputs." + input + ": '" + source.text() + "' is " + dtypeName(have->dtype)
                    + " but problem " + prob.name + "'s input " + input + " is " + dtypeName(want->dtype));
        }
    }
    std::set<std::string> inputNames;
    for (std::size_t i = 0; i < p.inputs.size(); ++i) {
        const std::string w = where + ".inputs[" + std::to_string(i) + "]";
        if (!Expr::isVariableName(p.inputs[i]))
            throw InputError(w + ": '" + abbreviate(p.inputs[i]) + "' must be letters, digits and '_'");
        if (!inputNames.insert(p.inputs[i]).second)
            throw InputError(w + ": input '" + p.inputs[i] + "' is declared twice");
        if (!p.sourceSpec({ "", p.inputs[i] }))
            throw InputError(w + ": input '" + p.inputs[i] + "' is read by no stage");
    }
    if (p.outputs.empty())
        throw InputError(where + ".outputs: at least one output is required");
    std::set<std::string> outputNames;
    for (std::size_t i = 0; i < p.outputs.size(); ++i) {
        const PipelineOutput& o = p.outputs[i];
        const std::string w = where + ".outputs[" + std::to_string(i) + "]";
        if (!Expr::isVariableName(o.name))
            throw InputError(w + ".name: '" + abbreviate(o.name) + "' must be letters, digits and '_'");
        if (!outputNames.insert(o.name).second)
            throw InputError(w + ".name: output '" + o.name + "' is declared twice");
        if (o.source.stage.empty() || !p.stage(o.source.stage))
            throw InputError(w + ".from: '" + abbreviate(o.source.text())
                + "' is produced by no stage (an output is written stage.tensor)");
        if (!p.sourceSpec(o.source))
            throw InputError(w + ".from: '" + abbreviate(o.source.text()) + "': problem "
                + p.stage(o.source.stage)->problemName + " of stage " + o.source.stage + " produces no '"
                + abbreviate(o.source.tensor) + "'");
    }

    auto atEveryShape = [&](const std::vector<Shape>& shapes, const char* key) {
        for (std::size_t s = 0; s < shapes.size(); ++s) {
            const std::string at
                = std::string(" at ") + key + "[" + std::to_string(s) + "] (" + shapes[s].label() + ")";
            for (std::size_t i = 0; i < p.stages.size(); ++i) {
                const PipelineStage& st = p.stages[i];
                const std::string w = where + ".stages[" + std::to_string(i) + "]";
                Shape stageShape;
                std::string why;
                try {
                    stageShape = st.shapeAt(shapes[s]);
                } catch (const ExprError& e) {
                    throw InputError(w + ".dims" + at + ": " + e.what());
                }
                if (!st.problem.shapeIsValid(stageShape, &why))
                    throw InputError(w + ".dims" + at + ": " + stageShape.label()
                        + " is outside the validity range of problem " + st.problemName + ": " + why);
                for (const auto& [input, source] : st.inputs) {
                    std::vector<std::int64_t> have, want;
                    try {
                        have = p.extentsAt(source, shapes[s]);
                        want = extents(*st.problem.tensor(input), stageShape);
                    } catch (const ExprError& e) {
                        throw InputError(w + ".inputs." + input + at + ": " + e.what());
                    }
                    const bool mismatch = st.reshaped.count(input)
                        ? std::accumulate(have.begin(), have.end(), std::int64_t { 1 }, std::multiplies<>())
                            != std::accumulate(want.begin(), want.end(), std::int64_t { 1 }, std::multiplies<>())
                        : have != want;
                    if (mismatch)
                        throw InputError(w + ".inputs." + input + at + ": '" + source.text() + "' is "
                            + extentsText(have) + " but problem " + st.problemName + "'s input " + input + " is "
                            + extentsText(want)
                            + (st.reshaped.count(input) ? " (reshaped: the element counts differ)" : ""));
                }
            }
        }
    };
    atEveryShape(p.space.tuningShapes, "tuning_shapes");
    atEveryShape(p.space.verifyShapes, "verify_shapes");
    validateProblem(p.space, where);
}

Pipeline pipelineFromJson(const Json& j, const std::string& where, const ProblemLookup& lookup)
{
    Pipeline p;
    p.name = string(j, "name", where);
    if (!isSafeId(p.name))
        throw InputError(where + ".name: '" + abbreviate(p.name) + "' must be letters, digits, '_' or '-'");
    p.description = stringOr(j, "description", "", where);
    p.space.name = p.name;
    dimSpaceFromJson(j, where, p.space);
    p.space.tuningShapes = shapesFromJson(j, "tuning_shapes", p.space, where);
    p.space.verifyShapes = shapesFromJson(j, "verify_shapes", p.space, where);
    if (p.space.tuningShapes.empty())
        throw InputError(where + ".tuning_shapes: at least one shape is required");
    p.space.flops = exprField(j, "flops", where);
    p.space.bytes = exprField(j, "bytes", where);
    {
        int i = 0;
        for (const auto& n : arrayField(j, "inputs", where)) {
            const std::string w = where + ".inputs[" + std::to_string(i++) + "]";
            if (!n.is_string())
                throw InputError(w + ": expected a tensor name");
            p.inputs.push_back(n.get<std::string>());
        }
    }
    {
        int i = 0;
        for (const auto& s : arrayField(j, "stages", where)) {
            const std::string w = where + ".stages[" + std::to_string(i++) + "]";
            PipelineStage st;
            st.name = string(s, "name", w);
            st.problemName = string(s, "problem", w);
            try {
                st.problem = lookup(st.problemName);
            } catch (const InputError& e) {
                throw InputError(w + ".problem: " + e.what());
            }
            if (const Json* dims = optionalObject(s, "dims", w))
                for (const auto& [dim, e] : dims->items())
                    st.dims.emplace(dim, exprField(*dims, dim.c_str(), w + ".dims"));
            const Json* inputs = optionalObject(s, "inputs", w);
            if (inputs)
                for (const auto& [input, from] : inputs->items()) {
                    const std::string wi = w + ".inputs." + abbreviate(input);
                    if (from.is_object()) {
                        st.inputs.emplace(input, TensorSource::parse(string(from, "from", wi)));
                        if (booleanOr(from, "reshape", false, wi))
                            st.reshaped.insert(input);
                        continue;
                    }
                    if (!from.is_string())
                        throw InputError(
                            wi + ": expected a pipeline input, stage.tensor or {\"from\": ..., \"reshape\": true}");
                    st.inputs.emplace(input, TensorSource::parse(from.get<std::string>()));
                }
            if (s.contains("impl"))
                st.impl = implFromJson(s.at("impl"), w + ".impl");
            if (st.impl.kind == StageImpl::Kind::Library && st.problem.libraryBaseline.empty())
                throw InputError(w + ".impl: problem " + st.problemName + " has no library fallback");
            p.stages.push_back(std::move(st));
        }
        if (p.stages.empty())
            throw InputError(where + ".stages: at least one stage is required");
    }
    {
        int i = 0;
        for (const auto& o : arrayField(j, "outputs", where)) {
            const std::string w = where + ".outputs[" + std::to_string(i++) + "]";
            p.outputs.push_back({ string(o, "name", w), TensorSource::parse(string(o, "from", w)) });
        }
    }
    if (const Json* peaks = optionalObject(j, "peaks", where)) {
        const std::string w = where + ".peaks";
        p.peaks.flopsPerSecond = number(*peaks, "flops_per_s", w);
        p.peaks.bytesPerSecond = number(*peaks, "bytes_per_s", w);
        p.peaks.source = string(*peaks, "source", w);
        if (!(p.peaks.flopsPerSecond > 0) || !(p.peaks.bytesPerSecond > 0))
            throw InputError(w + ": peaks are rates above 0");
    }
    validatePipeline(p, where);
    return p;
}

Json toJson(const Pipeline& p)
{
    // The dims, shapes and formulas in problem.json's form, written once there.
    const Json space = toJson(p.space);
    Json j = { { "name", p.name }, { "description", p.description } };
    for (const char* key :
        { "dims", "constants", "dim_constraints", "tuning_shapes", "verify_shapes", "flops", "bytes" })
        if (space.contains(key))
            j[key] = space.at(key);
    j["inputs"] = p.inputs;
    Json stages = Json::array();
    for (const auto& st : p.stages) {
        Json dims = Json::object(), inputs = Json::object();
        for (const auto& [d, e] : st.dims)
            dims[d] = e.text();
        for (const auto& [t, s] : st.inputs)
            inputs[t] = st.reshaped.count(t) ? Json { { "from", s.text() }, { "reshape", true } } : Json(s.text());
        stages.push_back({ { "name", st.name }, { "problem", st.problemName }, { "dims", dims }, { "inputs", inputs },
            { "impl", implToJson(st.impl) } });
    }
    j["stages"] = stages;
    Json outputs = Json::array();
    for (const auto& o : p.outputs)
        outputs.push_back({ { "name", o.name }, { "from", o.source.text() } });
    j["outputs"] = outputs;
    if (p.peaks.flopsPerSecond > 0)
        j["peaks"] = { { "flops_per_s", p.peaks.flopsPerSecond }, { "bytes_per_s", p.peaks.bytesPerSecond },
            { "source", p.peaks.source } };
    return j;
}

Pipeline loadPipeline(const fs::path& folder, const ProblemLookup& lookup)
{
    const fs::path file = folder / "pipeline.json";
    Pipeline p = pipelineFromJson(readJsonFile(file), file.string(), lookup);
    p.folder = folder.string();
    return p;
}

std::vector<Pipeline> loadPipelines(std::vector<std::string>* errors)
{
    std::vector<Pipeline> out;
    for (const auto& name : listPipelines()) {
        try {
            out.push_back(loadPipeline(findPipelineFolder(name)));
        } catch (const InputError& e) {
            if (errors)
                errors->push_back(e.what());
        }
    }
    return out;
}

} // namespace kl
