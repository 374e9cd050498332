#include "kernels/export/flashinfer_bench.h"

#include "core/catalogue.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/session_store.h"
#include "kernels/export/exporter.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace kl::flashinfer_bench {

namespace {

    using OrderedJson = nlohmann::ordered_json;
    using namespace jsonfield;

    // Their DType names (flashinfer_bench/data/definition.py); nullopt marks one KernelLoop has no type for.
    const std::map<std::string, std::optional<DType>>& fibDtypes()
    {
        static const std::map<std::string, std::optional<DType>> m { { "float32", DType::F32 },
            { "float16", DType::F16 }, { "bfloat16", DType::BF16 }, { "float8_e4m3fn", DType::FP8E4M3 },
            { "int64", DType::I64 }, { "int32", DType::I32 }, { "float8_e5m2", std::nullopt },
            { "float4_e2m1", std::nullopt }, { "int16", std::nullopt }, { "int8", std::nullopt },
            { "bool", std::nullopt } };
        return m;
    }

    struct FibAxis {
        std::string name;
        bool constant = false;
        std::int64_t value = 0;
    };

    struct FibTensor {
        std::string name;
        DType dtype = DType::F32;
        std::optional<std::vector<std::string>> shape; // nullopt: a scalar
        bool output = false;
    };

    struct FibWorkload {
        std::map<std::string, std::int64_t> axes;
        Json inputs = Json::object();
        std::string uuid;
        int line = 0;
    };

    struct Definition {
        std::string file;
        OrderedJson json;
        std::string name;
        std::string opType;
        std::string description;
        std::string reference; // Python
        std::vector<FibAxis> axes;
        std::vector<FibTensor> tensors; // inputs, then outputs, each in the definition's order
        const FibAxis* axis(const std::string& n) const
        {
            for (const auto& a : axes)
                if (a.name == n)
                    return &a;
            return nullptr;
        }
    };

    Json parseJsonText(const std::string& text, const std::string& where)
    {
        try {
            return Json::parse(text);
        } catch (const Json::parse_error& e) {
            throw InputError(where + ": not valid JSON (byte " + std::to_string(e.byte) + ")");
        }
    }

    std::string readInput(const fs::path& file)
    {
        if (fs::is_directory(file))
            throw InputError(file.string() + " is a directory, not a file");
        try {
            return readFile(file, 64u << 20);
        } catch (const std::exception& e) {
            throw InputError(file.string() + ": " + e.what());
        }
    }

    const Json& objectField(const Json& j, const char* key, const std::string& where)
    {
        const Json& v = require(j, key, where);
        if (!v.is_object())
            throw InputError(where + "." + key + ": expected an object, got " + v.type_name());
        return v;
    }

    Definition parseDefinition(const fs::path& file)
    {
        Definition d;
        d.file = file.string();
        const std::string text = readInput(file);
        const Json j = parseJsonText(text, d.file);
        d.json = OrderedJson::parse(text); // the key order of axes, inputs and outputs is the kernel's interface
        const std::string& w = d.file;
        d.name = string(j, "name", w);
        if (!isSafeId(d.name))
            throw InputError(w + ".name: '" + abbreviate(d.name)
                + "' must be letters, digits, '_' or '-' to name a KernelLoop problem");
        d.opType = string(j, "op_type", w);
        if (d.opType.empty())
            throw InputError(w + ".op_type: empty");
        d.description = stringOr(j, "description", "", w);
        d.reference = string(j, "reference", w);
        objectField(j, "axes", w);
        for (const auto& [name, spec] : d.json.at("axes").items()) {
            const std::string wa = w + ".axes." + abbreviate(name);
            const Json a = Json::parse(spec.dump());
            FibAxis axis;
            axis.name = name;
            // Their writer leaves out a default it was not given: an axis without a type is const when it has a value.
            const std::string type = stringOr(a, "type", a.contains("value") ? "const" : "var", wa);
            if (type == "const") {
                axis.constant = true;
                axis.value = integer(a, "value", wa, 1, std::int64_t(1) << 40);
            } else if (type != "var") {
                throw InputError(wa + ".type: expected \"const\" or \"var\", got '" + abbreviate(type) + "'");
            }
            d.axes.push_back(axis);
        }
        for (const char* group : { "inputs", "outputs" }) {
            objectField(j, group, w);
            for (const auto& [name, spec] : d.json.at(group).items()) {
                const std::string wt = w + "." + group + "." + abbreviate(name);
                const Json t = Json::parse(spec.dump());
                FibTensor ft;
                ft.name = name;
                ft.output = std::string(group) == "outputs";
                const std::string dt = string(t, "dtype", wt);
                const auto known = fibDtypes().find(dt);
                if (known == fibDtypes().end())
                    throw InputError(wt + ".dtype: unknown dtype '" + abbreviate(dt) + "'");
                if (!known->second)
                    throw InputError(wt + ".dtype: " + dt
                        + " has no KernelLoop type (float32, float16, bfloat16, float8_e4m3fn, int32, int64 do)");
                ft.dtype = *known->second;
                const Json& shape = require(t, "shape", wt);
                if (!shape.is_null()) {
                    if (!shape.is_array())
                        throw InputError(wt + ".shape: expected a list of axis names or null");
                    ft.shape.emplace();
                    for (std::size_t k = 0; k < shape.size(); ++k) {
                        const std::string wk = wt + ".shape[" + std::to_string(k) + "]";
                        if (!shape[k].is_string())
                            throw InputError(wk + ": expected an axis name");
                        const std::string a = shape[k].get<std::string>();
                        if (!d.axis(a))
                            throw InputError(wk + ": axis '" + abbreviate(a) + "' is not declared in axes");
                        ft.shape->push_back(a);
                    }
                }
                for (const auto& other : d.tensors)
                    if (other.name == ft.name)
                        throw InputError(wt + ": the name is both an input and an output");
                d.tensors.push_back(std::move(ft));
            }
        }
        if (std::none_of(d.tensors.begin(), d.tensors.end(), [](const FibTensor& t) { return t.output; }))
            throw InputError(w + ".outputs: at least one output is required");
        return d;
    }

    fs::path traceSetNeighbour(const fs::path& definitionFile, const std::string& opType, const char* folder)
    {
        // definitions/OP/NAME.json in a TraceSet: its workloads are in workloads/OP/NAME.jsonl
        const fs::path root = definitionFile.parent_path().parent_path().parent_path();
        return root / folder / opType / (definitionFile.stem().string() + ".jsonl");
    }

    std::vector<FibWorkload> parseWorkloads(const fs::path& file, const Definition& d)
    {
        std::istringstream lines(readInput(file));
        std::vector<FibWorkload> out;
        std::string line;
        int n = 0;
        while (std::getline(lines, line)) {
            ++n;
            if (line.find_first_not_of(" \t\r") == std::string::npos)
                continue;
            const std::string where = file.string() + ":" + std::to_string(n);
            const Json j = parseJsonText(line, where);
            // A workload trace (their TraceSet's workloads/ lines) or a bare Workload.
            const bool trace = j.is_object() && j.contains("workload");
            if (trace && j.contains("definition") && string(j, "definition", where) != d.name)
                throw InputError(where + ".definition: '" + abbreviate(string(j, "definition", where))
                    + "' is not the definition '" + d.name + "'");
            const std::string ww = trace ? where + ".workload" : where;
            const Json& wj = trace ? objectField(j, "workload", where) : j;
            FibWorkload wl;
            wl.line = n;
            wl.uuid = string(wj, "uuid", ww);
            if (wl.uuid.empty())
                throw InputError(ww + ".uuid: empty");
            if (wj.contains("inputs"))
                wl.inputs = objectField(wj, "inputs", ww);
            const Json& axes = objectField(wj, "axes", ww);
            for (const auto& [name, v] : axes.items()) {
                const FibAxis* a = d.axis(name);
                if (!a || a->constant)
                    throw InputError(ww + ".axes." + abbreviate(name) + ": not a var axis of definition " + d.name);
                wl.axes[name] = integer(axes, name.c_str(), ww + ".axes", 1, std::int64_t(1) << 40);
            }
            for (const auto& a : d.axes)
                if (!a.constant && !wl.axes.count(a.name))
                    throw InputError(ww + ".axes." + a.name + ": missing (a var axis of definition " + d.name + ")");
            out.push_back(std::move(wl));
        }
        if (out.empty())
            throw InputError(file.string() + ": no workloads (tuning shapes come from them)");
        return out;
    }

    // The scalar inputs' values: one per problem in KernelLoop, so every workload must give the same.
    std::vector<ScalarSpec> scalarInputs(
        const Definition& d, const std::vector<FibWorkload>& workloads, const fs::path& workloadsFile)
    {
        std::vector<ScalarSpec> out;
        for (const auto& t : d.tensors) {
            if (t.shape || t.output)
                continue;
            ScalarSpec s;
            s.name = t.name;
            s.dtype
                = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 ? DType::F32 : DType::I32;
            std::optional<double> value;
            for (const auto& w : workloads) {
                const std::string where = workloadsFile.string() + ":" + std::to_string(w.line) + ".inputs." + t.name;
                if (!w.inputs.contains(t.name))
                    throw InputError(where + ": missing (scalar input of definition " + d.name + ")");
                const Json& in = w.inputs.at(t.name);
                if (stringOr(in, "type", in.contains("value") ? "scalar" : "", where) != "scalar")
                    throw InputError(where + ".type: a scalar input needs {\"type\": \"scalar\", \"value\": ...}");
                const double v = in.contains("value") && in.at("value").is_boolean()
                    ? double(in.at("value").get<bool>())
                    : number(in, "value", where);
                if (value && *value != v)
                    throw InputError(where
                        + ".value: differs from an earlier workload's; a KernelLoop problem has one "
                          "value per scalar");
                value = v;
            }
            s.value = *value;
            out.push_back(s);
        }
        return out;
    }

    struct Match {
        std::map<std::string, std::string> axisToDim;
        std::map<std::string, std::string> tensorToTensor; // definition tensor -> problem tensor
    };

    std::vector<const TensorSpec*> tensorsOf(const Problem& p, TensorRole role)
    {
        std::vector<const TensorSpec*> out;
        for (const auto& t : p.tensors)
            if (t.role == role)
                out.push_back(&t);
        return out;
    }

    // Empty when p matches d (the rule of importDefinition), else why not.
    std::string matchProblem(const Definition& d, const Problem& p, Match& m)
    {
        std::map<std::string, std::string> dimToAxis;
        for (const bool output : { false, true }) {
            std::vector<const FibTensor*> mine;
            for (const auto& t : d.tensors)
                if (t.output == output && t.shape)
                    mine.push_back(&t);
            const auto theirs = tensorsOf(p, output ? TensorRole::Output : TensorRole::Input);
            const std::string kind = output ? "output" : "input";
            if (mine.size() != theirs.size())
                return "the definition has " + std::to_string(mine.size()) + " " + kind + " tensor(s), " + p.name + " "
                    + std::to_string(theirs.size());
            for (std::size_t i = 0; i < mine.size(); ++i) {
                const FibTensor& a = *mine[i];
                const TensorSpec& b = *theirs[i];
                if (a.dtype != b.dtype)
                    return kind + " " + a.name + " is " + dtypeName(a.dtype) + ", " + p.name + "'s " + b.name + " "
                        + dtypeName(b.dtype);
                if (a.shape->size() != b.shape.size())
                    return kind + " " + a.name + " has rank " + std::to_string(a.shape->size()) + ", " + p.name + "'s "
                        + b.name + " " + std::to_string(b.shape.size());
                for (std::size_t k = 0; k < b.shape.size(); ++k) {
                    const std::string dim = b.shape[k].text();
                    const std::string& axis = (*a.shape)[k];
                    if (!p.dim(dim))
                        return b.name + "'s extent " + dim + " is not a plain dim";
                    const auto ad = m.axisToDim.find(axis);
                    const auto da = dimToAxis.find(dim);
                    if ((ad != m.axisToDim.end() && ad->second != dim) || (da != dimToAxis.end() && da->second != axis))
                        return "axis " + axis + " and dim " + dim + " do not pair one to one";
                    m.axisToDim[axis] = dim;
                    dimToAxis[dim] = axis;
                }
                m.tensorToTensor[a.name] = b.name;
            }
        }
        for (const auto& t : d.tensors)
            if (!t.shape && !t.output && !p.scalar(t.name))
                return "scalar input " + t.name + " is not a scalar of " + p.name;
        for (const auto& dim : p.dims)
            if (!dimToAxis.count(dim.name))
                return "dim " + dim.name + " has no axis";
        for (const auto& a : d.axes)
            if (!m.axisToDim.count(a.name))
                return "axis " + a.name + " is no extent of its tensors";
        return {};
    }

    Shape shapeOf(const FibWorkload& w, const Definition& d, const std::map<std::string, std::string>& axisToDim)
    {
        Shape s;
        for (const auto& a : d.axes)
            s.dims[axisToDim.at(a.name)] = a.constant ? a.value : w.axes.at(a.name);
        return s;
    }

    // Dims from the axes: constants stay constant, a var axis spans its workloads' values.
    void setDimsFromWorkloads(Problem& p, const Definition& d, const std::vector<FibWorkload>& workloads,
        const std::map<std::string, std::string>& axisToDim)
    {
        for (const auto& a : d.axes) {
            DimSpec* ds = nullptr;
            for (auto& x : p.dims)
                if (x.name == axisToDim.at(a.name))
                    ds = &x;
            ds->constant = a.constant;
            if (a.constant) {
                ds->min = ds->max = a.value;
                ds->logUniform = false;
                continue;
            }
            ds->min = ds->max = workloads.front().axes.at(a.name);
            for (const auto& w : workloads) {
                ds->min = std::min(ds->min, w.axes.at(a.name));
                ds->max = std::max(ds->max, w.axes.at(a.name));
            }
            ds->logUniform = ds->max >= 4 * ds->min;
        }
        // Tuning shapes: the distinct workloads, each weighted by how often it occurs; verification adds the corners.
        std::map<Shape, double> counts;
        for (const auto& w : workloads)
            counts[shapeOf(w, d, axisToDim)] += 1;
        p.tuningShapes.clear();
        for (const auto& [s, n] : counts) {
            p.tuningShapes.push_back(s);
            p.tuningShapes.back().weight = n;
        }
        Shape low, high;
        for (const auto& ds : p.dims) {
            const std::int64_t m = std::max<std::int64_t>(1, ds.multipleOf);
            low.dims[ds.name] = (ds.min + m - 1) / m * m;
            high.dims[ds.name] = ds.max / m * m;
        }
        p.verifyShapes = { low };
        if (!(high == low))
            p.verifyShapes.push_back(high);
    }

    // The shapes p must hold; empty when it holds them all, else the first that does not fit and why.
    std::string shapesThatDoNotFit(const Problem& p)
    {
        for (const auto* list : { &p.tuningShapes, &p.verifyShapes })
            for (const auto& s : *list) {
                std::string why;
                if (!p.shapeIsValid(s, &why))
                    return s.label() + ": " + why;
            }
        return {};
    }

    std::string bytesFormula(const Problem& p)
    {
        std::string f;
        for (const auto& t : p.tensors) {
            std::string term = std::to_string(dtypeBytes(t.dtype));
            for (const auto& e : t.shape)
                term += "*(" + e.text() + ")";
            f += (f.empty() ? "" : " + ") + term;
        }
        return f.empty() ? "0" : f;
    }

    Problem problemFromReference(const Definition& d, const std::vector<FibWorkload>& workloads,
        const fs::path& workloadsFile, std::map<std::string, std::string>& axisToDim)
    {
        Problem p;
        p.name = d.name;
        for (const auto& a : d.axes) {
            if (const auto bad = badProblemName(p, a.name, "dim"))
                throw InputError(d.file + ".axes." + abbreviate(a.name) + ": " + *bad);
            DimSpec ds;
            ds.name = a.name;
            p.dims.push_back(ds);
            axisToDim[a.name] = a.name;
        }
        p.scalars = scalarInputs(d, workloads, workloadsFile);
        for (const auto& t : d.tensors) {
            if (!t.shape)
                continue;
            if (const auto bad = badProblemName(p, t.name, "tensor"))
                throw InputError(d.file + (t.output ? ".outputs." : ".inputs.") + abbreviate(t.name) + ": " + *bad);
            TensorSpec ts;
            ts.name = t.name;
            ts.dtype = t.dtype;
            ts.role = t.output ? TensorRole::Output : TensorRole::Input;
            for (const auto& a : *t.shape)
                ts.shape.push_back(Expr::parse(a));
            p.tensors.push_back(std::move(ts));
        }
        setDimsFromWorkloads(p, d, workloads, axisToDim);
        p.flops = Expr::parse("0"); // not known from a definition
        p.bytes = Expr::parse(bytesFormula(p));
        p.baselineFile = p.templateFile = p.referenceFile;
        return p;
    }

    std::vector<fs::path> catalogueFolders(const ImportOptions& o)
    {
        if (!o.catalogue.empty())
            return o.catalogue;
        std::vector<fs::path> out;
        for (const auto& name : listProblems())
            out.push_back(findProblemFolder(name));
        return out;
    }

    std::vector<std::string> sourceFiles(const Problem& p)
    {
        std::set<std::string> files { p.referenceFile, p.baselineFile, p.templateFile };
        if (!p.tritonTemplateFile.empty())
            files.insert(p.tritonTemplateFile);
        for (const auto& [arch, f] : p.archTemplates)
            files.insert(f);
        return { files.begin(), files.end() };
    }

} // namespace

ImportResult importDefinition(const ImportOptions& o)
{
    const Definition d = parseDefinition(o.definitionFile);
    const fs::path workloadsFile = o.workloadsFile.value_or(traceSetNeighbour(o.definitionFile, d.opType, "workloads"));
    if (!o.workloadsFile && !fs::exists(workloadsFile))
        throw InputError(d.file + ": definition " + d.name + " needs its workloads (the tuning shapes): pass "
            + "--workloads FILE.jsonl (looked for " + workloadsFile.string() + ")");
    const std::vector<FibWorkload> workloads = parseWorkloads(workloadsFile, d);

    ImportResult r;
    r.workloads = workloads.size();
    r.folder = o.intoDir / d.name;
    if (fs::exists(r.folder) && !(fs::is_directory(r.folder) && fs::is_empty(r.folder)))
        throw InputError(r.folder.string() + " exists and is not empty; choose another --into");
    std::map<std::string, std::string> files; // problem-folder file -> content
    Match match;
    Problem p;
    if (o.referenceFile) {
        p = problemFromReference(d, workloads, workloadsFile, r.axisToDim);
        const std::string source = readInput(*o.referenceFile);
        try {
            parseKernelSpec(source, p);
        } catch (const InputError& e) {
            throw InputError(o.referenceFile->string() + ": " + e.what());
        }
        files[p.referenceFile] = source;
        r.referenceFrom = o.referenceFile->string();
        if (const std::string bad = shapesThatDoNotFit(p); !bad.empty())
            throw InputError(workloadsFile.string() + ": workload " + bad);
        for (const auto& t : d.tensors)
            if (t.shape)
                match.tensorToTensor[t.name] = t.name;
    } else {
        std::string reasons;
        std::vector<fs::path> folders = catalogueFolders(o);
        // The problem named like the op_type is tried first (their rmsnorm definitions, our rmsnorm).
        std::stable_partition(
            folders.begin(), folders.end(), [&](const fs::path& f) { return f.filename() == d.opType; });
        for (const auto& folder : folders) {
            Problem q;
            try {
                q = loadProblem(folder.string());
            } catch (const InputError& e) {
                reasons += "\n  " + folder.string() + ": unreadable (" + e.what() + ")";
                continue;
            }
            Match m;
            std::string why = matchProblem(d, q, m);
            for (std::size_t i = 0; why.empty() && i < workloads.size(); ++i) {
                const Shape s = shapeOf(workloads[i], d, m.axisToDim);
                if (!q.shapeIsValid(s, &why))
                    why = "workload " + workloads[i].uuid + " (" + s.label() + "): " + why;
            }
            if (why.empty()) {
                setDimsFromWorkloads(q, d, workloads, m.axisToDim);
                why = shapesThatDoNotFit(q);
            }
            if (!why.empty()) {
                reasons += "\n  " + q.name + ": " + why;
                continue;
            }
            r.referenceFrom = "catalogue problem " + q.name;
            r.axisToDim = m.axisToDim;
            match = m;
            for (const auto& f : sourceFiles(q))
                files[f] = readInput(fs::path(folder) / f);
            for (const auto& given : scalarInputs(d, workloads, workloadsFile)) {
                ScalarSpec& mine = *std::find_if(
                    q.scalars.begin(), q.scalars.end(), [&](const ScalarSpec& x) { return x.name == given.name; });
                mine.value = given.value; // the workloads' value replaces the catalogue's
                mine.formula.reset();
            }
            q.description = (d.description.empty() ? "FlashInfer-Bench definition " + d.name : d.description)
                + " (imported; kernels from the " + r.referenceFrom + ")";
            q.name = d.name;
            p = std::move(q);
            break;
        }
        if (r.referenceFrom.empty()) {
            std::string tensors, scalars, axes;
            for (const auto& t : d.tensors)
                (t.shape ? tensors : scalars) += ((t.shape ? tensors : scalars).empty() ? "" : ", ") + t.name;
            for (const auto& a : d.axes)
                axes += (axes.empty() ? "" : ", ") + a.name;
            throw InputError(d.file + ": definition " + d.name + " (op_type " + d.opType
                + ") matches no catalogue problem:" + reasons
                + "\npass --reference FILE.cu: a CUDA reference kernel whose @kl:launch line names the tensors ("
                + tensors + (scalars.empty() ? "" : "), scalars (" + scalars) + ") and axes (" + axes + ")");
        }
    }
    for (const auto& tag : { d.opType, std::string("flashinfer-bench") })
        if (std::find(p.tags.begin(), p.tags.end(), tag) == p.tags.end())
            p.tags.push_back(tag);
    // The problem must load as written: the same parser the catalogue uses.
    const Json problemJson = toJson(p);
    problemFromJson(problemJson, (r.folder / "problem.json").string());

    OrderedJson record;
    record["flashinfer_bench_version"] = kSchemaVersion;
    record["definition"] = d.json;
    record["axes"] = r.axisToDim;
    record["tensors"] = match.tensorToTensor;
    record["reference_from"] = r.referenceFrom;
    record["workloads"] = OrderedJson::array();
    for (const auto& w : workloads)
        record["workloads"].push_back(
            { { "uuid", w.uuid }, { "axes", w.axes }, { "inputs", OrderedJson::parse(w.inputs.dump()) } });

    fs::create_directories(r.folder);
    for (const auto& [name, content] : files)
        writeFileAtomic(r.folder / name, content);
    writeFileAtomic(r.folder / "reference.py", d.reference);
    writeFileAtomic(r.folder / kImportRecordFile, record.dump(2) + "\n");
    writeFileAtomic(r.folder / "problem.json", problemJson.dump(2) + "\n");
    r.problem = loadProblem(r.folder.string());
    return r;
}

ExportResult exportSolution(const Session& s, const Problem& problem, const ExportOptions& o)
{
    if (o.outDir.empty())
        throw InputError("export: no output directory (--out DIR)");
    // A FlashInfer-Bench definition names each tensor an input or an output, never both.
    for (const auto& t : problem.tensors)
        if (t.role == TensorRole::InOut)
            throw InputError("export: problem " + problem.name + " updates tensor '" + t.name
                + "' in place (role inout), which a FlashInfer-Bench definition cannot state; export it as a bundle");
    ExportResult r;
    r.candidateId = o.candidateId.empty() ? exporter::defaultCandidate(s) : o.candidateId;
    const exporter::ExportPlan plan = exporter::planExport(s, problem, r.candidateId, o.minSpeedup);
    if (!plan.refusals.empty()) {
        std::string msg = "refusing to export candidate " + r.candidateId + " as a FlashInfer-Bench solution:";
        for (const auto& x : plan.refusals)
            msg += "\n  - " + x.code + ": " + x.message;
        throw exporter::ExportRefused(msg, plan.refusals);
    }
    const Candidate& c = s.tree.at(r.candidateId);
    const Evaluation& ev = s.evaluations.at(r.candidateId);

    // The names FlashInfer-Bench knows the problem by: the imported definition's, else the problem's own.
    OrderedJson record;
    const fs::path recordFile = fs::path(problem.folder) / kImportRecordFile;
    if (!problem.folder.empty() && fs::exists(recordFile)) {
        try {
            record = OrderedJson::parse(readInput(recordFile));
        } catch (const OrderedJson::exception& e) {
            throw InputError(recordFile.string() + ": " + e.what());
        }
    }
    const bool imported = record.is_object() && record.contains("definition");
    const std::string definition = imported ? record["definition"].value("name", problem.name) : problem.name;
    const std::string opType = imported ? record["definition"].value("op_type", "kloop") : "kloop";
    std::map<std::string, std::string> dimToAxis;
    for (const auto& d : problem.dims)
        dimToAxis[d.name] = d.name;
    std::map<std::string, std::string> tensorName; // problem tensor -> definition tensor
    for (const auto& t : problem.tensors)
        tensorName[t.name] = t.name;
    if (imported) {
        const OrderedJson tensors = record.value("tensors", OrderedJson::object());
        for (const auto& [theirs, ours] : tensors.items())
            if (ours.is_string() && tensorName.count(ours.get<std::string>()))
                tensorName[ours.get<std::string>()] = theirs;
        const OrderedJson axes = record.value("axes", OrderedJson::object());
        for (const auto& [axis, dim] : axes.items()) {
            if (!dim.is_string() || !problem.dim(dim.get<std::string>()))
                throw InputError(recordFile.string() + ".axes." + abbreviate(axis) + ": not a dim of " + problem.name);
            dimToAxis[dim.get<std::string>()] = axis;
        }
    }

    const KernelLanguage language = detectLanguage(c.source);
    const KernelSpec spec = parseKernelSpec(c.source);
    if (spec.launches.empty())
        throw InputError("candidate " + r.candidateId + " has no @kl:launch line naming its kernel");
    const std::string sourcePath = language == KernelLanguage::Triton ? "kernel.py" : "kernel.cu";
    const std::string content = bakeParameters(c.source, c.params);
    if (const auto leaks = exporter::findLeaks(content, {}, { problem.folder }); !leaks.empty())
        throw InputError("candidate " + r.candidateId + "'s source carries " + leaks.front() + "; not exported");
    Json deps = Json::array();
    if (content.find("cutlass/") != std::string::npos || content.find("cute/") != std::string::npos)
        deps.push_back("cutlass");

    r.solutionName = definition + "_kloop_" + s.id + "_" + r.candidateId;
    std::ostringstream params;
    for (const auto& [k, v] : c.params)
        params << (params.tellp() > 0 ? ", " : "") << k << "=" << v;
    std::ostringstream description;
    description << "KernelLoop candidate " << r.candidateId << " of session " << s.id << " (" << c.agent
                << "), parameters " << (c.params.empty() ? "none" : params.str()) << "; objective " << ev.objective
                << " (weighted geometric-mean speedup over the problem's baseline kernel)";
    const std::string hardware = s.device.name.empty() ? "cuda" : s.device.name;
    const Json solution = { { "name", r.solutionName }, { "definition", definition },
        { "author", "kloop " + (c.agent.empty() ? std::string(authorName(c.author)) : c.agent) },
        { "spec",
            { { "language", language == KernelLanguage::Triton ? "triton" : "cuda" },
                { "target_hardware", Json::array({ hardware }) },
                { "entry_point", sourcePath + "::" + spec.launches.front().kernel }, { "dependencies", deps },
                { "destination_passing_style", true } } },
        { "sources", Json::array({ { { "path", sourcePath }, { "content", content } } }) },
        { "description", description.str() } };

    Json libs = Json::object();
    for (const auto& [k, v] : { std::pair<const char*, std::string> { "cuda_runtime", s.device.cudaRuntime },
             { "cuda_driver", s.device.driverVersion }, { "nvrtc", s.device.nvrtcVersion } })
        if (!v.empty())
            libs[k] = v;
    std::string traces;
    for (const ShapeResult& sr : ev.shapes) {
        if (!sr.timing)
            continue; // verified only: a PASSED trace carries a latency
        Json axes = Json::object();
        for (const auto& d : problem.dims)
            if (!d.constant)
                axes[dimToAxis.at(d.name)] = sr.shape.dims.at(d.name);
        Json workload = { { "axes", axes }, { "inputs", Json::object() } };
        if (imported)
            for (const auto& w : record.value("workloads", OrderedJson::array()))
                if (Json::parse(w.at("axes").dump()) == axes) {
                    workload["uuid"] = w.at("uuid").get<std::string>();
                    workload["inputs"] = Json::parse(w.at("inputs").dump());
                    break;
                }
        if (!workload.contains("uuid")) {
            workload["uuid"] = "kloop-" + sha256Hex(definition + "|" + sr.shape.label()).substr(0, 32);
            for (const auto& t : problem.tensors)
                if (t.role == TensorRole::Input)
                    workload["inputs"][tensorName.at(t.name)] = { { "type", "random" } };
        }
        double maxAbs = 0, relL2 = 0;
        for (const auto& ch : sr.checks) {
            maxAbs = std::max(maxAbs, ch.maxAbs);
            relL2 = std::max(relL2, ch.relL2);
        }
        // KernelLoop measures the relative L2 error, not their element-wise maximum: that one is not a number here.
        Json evaluation = {
            { "status", sr.correct ? "PASSED" : "INCORRECT_NUMERICAL" },
            { "environment", { { "hardware", hardware }, { "libs", libs } } }, { "timestamp", isoUtc(ev.finishedMs) },
            { "log",
                "kloop session " + s.id + ", candidate " + r.candidateId + (sr.heldOut ? ", held-out shape" : "")
                    + "; reference_latency_ms is the problem's baseline kernel timed interleaved with the candidate" },
            { "correctness",
                { { "max_absolute_error", maxAbs }, { "max_relative_error", "NaN" },
                    { "extra", { { "rel_l2", relL2 }, { "checks", sr.checks.size() }, { "held_out", sr.heldOut } } } } }
        };
        if (sr.correct)
            evaluation["performance"] = { { "latency_ms", sr.timing->medianUs / 1000.0 },
                { "reference_latency_ms", sr.baselineTiming ? sr.baselineTiming->medianUs / 1000.0 : 0.0 },
                { "speedup_factor", sr.speedup } };
        const Json trace = { { "definition", definition }, { "workload", workload }, { "solution", r.solutionName },
            { "evaluation", evaluation } };
        traces += trace.dump() + "\n";
        ++r.traces;
    }
    if (r.traces == 0)
        throw InputError("candidate " + r.candidateId + " has no timed shape to write as a trace");

    r.solutionFile = o.outDir / "solutions" / opType / definition / (r.solutionName + ".json");
    r.tracesFile = o.outDir / "traces" / opType / definition / (r.solutionName + ".jsonl");
    for (const auto& f : { r.solutionFile, r.tracesFile })
        if (fs::exists(f) && !o.overwrite)
            throw InputError(f.string() + " exists (an earlier export of this candidate); --overwrite replaces it");
    fs::create_directories(r.solutionFile.parent_path());
    fs::create_directories(r.tracesFile.parent_path());
    if (imported) {
        r.definitionFile = o.outDir / "definitions" / opType / (definition + ".json");
        if (!fs::exists(r.definitionFile)) {
            fs::create_directories(r.definitionFile.parent_path());
            writeFileAtomic(r.definitionFile, record["definition"].dump(2) + "\n");
        }
    }
    writeFileAtomic(r.solutionFile, solution.dump(2) + "\n");
    writeFileAtomic(r.tracesFile, traces);
    return r;
}

} // namespace kl::flashinfer_bench
