#include "profiler/workload.h"

#include "core/errors.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <unordered_map>

namespace kl::prof {

namespace {

    constexpr std::string_view kModulePrefix = "nn.Module: ";

    std::string pct(double f)
    {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f%%", f * 100);
        return buf;
    }

    std::string lower(std::string_view s)
    {
        std::string out(s);
        for (auto& c : out)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return out;
    }

    // "nn.Module: LlamaRMSNorm_0" -> "LlamaRMSNorm"; "" for anything else.
    std::string moduleClass(std::string_view name)
    {
        if (name.substr(0, kModulePrefix.size()) != kModulePrefix)
            return {};
        std::string_view cls = name.substr(kModulePrefix.size());
        const size_t us = cls.rfind('_');
        if (us != std::string_view::npos && us + 1 < cls.size()
            && std::all_of(cls.begin() + static_cast<std::ptrdiff_t>(us) + 1, cls.end(),
                [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
            cls = cls.substr(0, us);
        return std::string(cls);
    }

    // torch.autograd.profiler.emit_nvtx: "aten::mm, seq = 12, op_id = 3, sizes = [[512, 4096], [4096, 4096]], ...".
    std::optional<OpInputs> nvtxSizes(std::string_view name)
    {
        const size_t at = name.find(", sizes = [");
        if (at == std::string_view::npos)
            return std::nullopt;
        OpInputs in;
        size_t i = at + std::string_view(", sizes = [").size();
        int depth = 1;
        std::vector<int64_t>* cur = nullptr;
        bool list = false;
        int64_t number = -1;
        for (; i < name.size() && depth > 0; ++i) {
            const char c = name[i];
            if (std::isdigit(static_cast<unsigned char>(c))) {
                number = (number < 0 ? 0 : number * 10) + (c - '0');
                continue;
            }
            if (number >= 0 && cur && !list)
                cur->push_back(number);
            number = -1;
            if (c == '[') {
                ++depth;
                if (depth == 2) {
                    cur = &in.dims.emplace_back();
                    list = false;
                } else if (depth > 2) {
                    list = true;
                }
            } else if (c == ']') {
                if (depth == 2 && cur && list)
                    cur->clear();
                --depth;
            }
        }
        return in;
    }

    std::string opName(std::string_view name)
    {
        if (name.find(", sizes = [") != std::string_view::npos || name.find(", seq = ") != std::string_view::npos)
            return std::string(name.substr(0, name.find(", ")));
        return std::string(name);
    }

    // The class of an operation from its name: the vocabulary the phases and the groups speak.
    std::string opClassOf(std::string_view name)
    {
        const std::string n = lower(name);
        auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
        if (has("norm"))
            return "norm";
        if (has("softmax"))
            return "softmax";
        if (has("attention") || has("sdpa") || has("flash") || has("fmha"))
            return "attention";
        if (has("silu") || has("gelu") || has("relu") || has("sigmoid") || has("tanh") || has("swiglu")
            || has("activation"))
            return "activation";
        const bool endsMm = n.size() >= 2 && n.compare(n.size() - 2, 2, "mm") == 0;
        if (endsMm || has("matmul") || has("linear") || has("gemm") || has("conv") || has("_scaled_mm"))
            return "gemm";
        if (has("copy") || has("cat") || has("index") || has("embedding") || has("gather") || has("scatter")
            || has("memcpy") || has("memset") || has("clone") || has("contiguous"))
            return "copy";
        if (n.rfind("aten::", 0) == 0 || has("elementwise") || has("reduce"))
            return "elementwise";
        return "other";
    }

    // The class of what a problem's rule matches: its module's or its op's.
    std::string ruleClass(const TraceMatchRule& rule)
    {
        return opClassOf(rule.module.empty() ? rule.op : rule.module);
    }

    Bindings inputBindings(const OpInputs& in)
    {
        Bindings b;
        for (size_t i = 0; i < in.dims.size() && i < 100; ++i) {
            const auto& d = in.dims[i];
            const std::string p = "in" + std::to_string(i) + "_";
            b[p + "rank"] = static_cast<double>(d.size());
            double rows = 1;
            for (size_t k = 0; k < d.size(); ++k) {
                if (k < 8)
                    b[p + std::to_string(k)] = static_cast<double>(d[k]);
                if (k + 1 < d.size())
                    rows *= static_cast<double>(d[k]);
            }
            if (!d.empty()) {
                b[p + "rows"] = rows;
                b[p + "last"] = static_cast<double>(d.back());
            }
        }
        return b;
    }

    struct Frame {
        uint32_t event = kNone;
        std::string op; // framework op name ("aten::mm") or ""
        std::string module; // nn.Module class or ""
    };

    struct FrameMatch {
        bool matched = false;
        size_t problem = 0;
        size_t rule = 0;
        Shape shape;
        std::string outside;
    };

    struct Instance {
        size_t problem = 0;
        size_t rule = 0;
        Shape shape;
        std::string outside;
        int64_t startNs = 0;
        int64_t gpuNs = 0;
        std::vector<uint32_t> kernels;
    };

    class Matcher {
    public:
        Matcher(const Trace& t, const std::vector<Problem>& catalogue)
            : m_t(t)
            , m_problems(catalogue)
        {
        }

        // The CPU-side stack around a launch call, outermost first.
        std::vector<Frame> stackAt(uint32_t launch) const
        {
            const Event& l = m_t.event(launch);
            std::vector<uint32_t> around = m_t.eventsInWindow(l.row, l.start, l.start);
            std::erase_if(around, [&](uint32_t i) {
                const Event& e = m_t.event(i);
                return i == launch || (e.kind != EventKind::CpuOp && e.kind != EventKind::NvtxRange)
                    || e.start > l.start || e.end < l.end;
            });
            std::sort(around.begin(), around.end(), [&](uint32_t a, uint32_t b) {
                const Event& ea = m_t.event(a);
                const Event& eb = m_t.event(b);
                return ea.start != eb.start ? ea.start < eb.start : ea.end > eb.end;
            });
            std::vector<Frame> frames;
            for (uint32_t i : around) {
                const std::string_view name = m_t.name(m_t.event(i));
                Frame f;
                f.event = i;
                f.module = moduleClass(name);
                if (f.module.empty())
                    f.op = opName(name);
                frames.push_back(std::move(f));
            }
            return frames;
        }

        const OpInputs* inputsOf(uint32_t event)
        {
            if (const OpInputs* in = m_t.opInputs(event))
                return in;
            auto it = m_nvtxInputs.find(event);
            if (it == m_nvtxInputs.end()) {
                auto parsed = nvtxSizes(m_t.name(m_t.event(event)));
                it = m_nvtxInputs.emplace(event, std::move(parsed)).first;
            }
            return it->second ? &*it->second : nullptr;
        }

        // The op inside a module call whose inputs give its shape: the first with recorded inputs (named shapeOp
        // when the rule says so).
        const OpInputs* moduleInputs(const Frame& f, const std::string& shapeOp)
        {
            const Event& m = m_t.event(f.event);
            std::vector<uint32_t> inside = m_t.eventsInWindow(m.row, m.start, m.end);
            std::sort(inside.begin(), inside.end(),
                [&](uint32_t a, uint32_t b) { return m_t.event(a).start < m_t.event(b).start; });
            for (uint32_t i : inside) {
                const Event& e = m_t.event(i);
                if (i == f.event || e.lane <= m.lane || e.start < m.start || e.end > m.end)
                    continue;
                if (!shapeOp.empty() && opName(m_t.name(e)) != shapeOp)
                    continue;
                if (const OpInputs* in = inputsOf(i); in && !in->dims.empty())
                    return in;
            }
            return nullptr;
        }

        const FrameMatch& match(const Frame& f)
        {
            auto it = m_frames.find(f.event);
            if (it != m_frames.end())
                return it->second;
            FrameMatch fm;
            for (size_t p = 0; p < m_problems.size() && !fm.matched; ++p) {
                const Problem& problem = m_problems[p];
                for (size_t r = 0; r < problem.traceMatch.size() && !fm.matched; ++r) {
                    const TraceMatchRule& rule = problem.traceMatch[r];
                    const OpInputs* in = nullptr;
                    if (!rule.module.empty()) {
                        if (f.module.size() < rule.module.size()
                            || f.module.compare(f.module.size() - rule.module.size(), rule.module.size(), rule.module)
                                != 0)
                            continue;
                        in = moduleInputs(f, rule.shapeOp);
                    } else {
                        if (f.op != rule.op)
                            continue;
                        in = inputsOf(f.event);
                    }
                    if (!in)
                        continue;
                    if (!rule.dtypes.empty() && !in->types.empty()
                        && std::find(rule.dtypes.begin(), rule.dtypes.end(), in->types.front()) == rule.dtypes.end())
                        continue;
                    const Bindings b = inputBindings(*in);
                    try {
                        if (rule.when && !rule.when->evaluateBool(b))
                            continue;
                        Shape s;
                        for (const auto& [dim, e] : rule.dims)
                            s.dims[dim] = e.evaluateInt(b);
                        fm.shape = problem.withConstants(std::move(s));
                    } catch (const ExprError&) {
                        continue; // the op's inputs are not the ones this rule reads
                    }
                    if (!problem.shapeIsValid(fm.shape, &fm.outside) && fm.outside.empty())
                        fm.outside = "outside the validity range";
                    fm.matched = true;
                    fm.problem = p;
                    fm.rule = r;
                }
            }
            return m_frames.emplace(f.event, std::move(fm)).first->second;
        }

    private:
        const Trace& m_t;
        const std::vector<Problem>& m_problems;
        std::unordered_map<uint32_t, FrameMatch> m_frames;
        std::unordered_map<uint32_t, std::optional<OpInputs>> m_nvtxInputs;
    };

    struct KernelUse {
        uint32_t gpu = kNone;
        uint32_t launch = kNone;
        int64_t launchNs = 0;
    };

} // namespace

const TunableOp* Workload::tunableFor(const std::string& problem) const
{
    for (const auto& t : tunable)
        if (t.problem == problem)
            return &t;
    return nullptr;
}

Workload analyzeWorkload(const Trace& trace, const std::vector<Problem>& catalogue, const WorkloadOptions& opts)
{
    Workload w;
    Ceilings ceil = opts.ceilings;
    if (ceil.device.empty())
        for (const auto& d : trace.devices())
            if (ceil.device.empty())
                ceil = Ceilings::forDeviceName(d.name);

    std::vector<KernelUse> work;
    int64_t lo = 0, hi = 0;
    for (uint32_t i = 0; i < trace.eventCount(); ++i) {
        const Event& e = trace.event(i);
        if (!isGpuWork(e.kind))
            continue;
        const uint32_t launch = trace.launchOf(i);
        work.push_back({ i, launch, launch != kNone ? trace.event(launch).start : e.start });
        w.gpuNs += e.duration();
        lo = work.size() == 1 ? e.start : std::min(lo, e.start);
        hi = work.size() == 1 ? e.end : std::max(hi, e.end);
    }
    w.windowNs = hi - lo;
    w.opsWithShapes = trace.opInputsCount();
    std::sort(work.begin(), work.end(), [](const KernelUse& a, const KernelUse& b) { return a.launchNs < b.launchNs; });

    Matcher matcher(trace, catalogue);
    std::vector<Instance> instances;
    std::unordered_map<uint32_t, size_t> instanceOfFrame;
    struct Group {
        std::string opClass;
        std::string problem;
        uint64_t kernels = 0;
        int64_t gpuNs = 0;
    };
    std::map<std::string, Group> groups;
    // The op a problem fuses after its matched op (silu_and_mul: the aten::mul after aten::silu), per launching row.
    struct PendingThen {
        size_t instance = 0;
        std::string op;
        int64_t afterNs = 0;
        uint32_t frame = kNone;
    };
    std::unordered_map<uint32_t, PendingThen> pending;
    // Per GPU item, from the one walk of its launch stack: its class, and the top-level call (outermost module call,
    // else outermost range) the phases are made of.
    std::vector<std::string> classOfWork(work.size());
    std::vector<std::pair<uint32_t, std::string>> callOfWork(work.size(), { kNone, {} });

    for (size_t u = 0; u < work.size(); ++u) {
        const KernelUse& k = work[u];
        const Event& g = trace.event(k.gpu);
        classOfWork[u] = g.kind == EventKind::Kernel ? "other" : "copy";
        if (k.launch == kNone) {
            auto& grp = groups["(no launch record)"];
            grp.opClass = g.kind == EventKind::Kernel ? "other" : "copy";
            ++grp.kernels;
            grp.gpuNs += g.duration();
            continue;
        }
        const uint32_t row = trace.event(k.launch).row;
        const std::vector<Frame> stack = matcher.stackAt(k.launch);
        if (const auto outer
            = std::find_if(stack.begin(), stack.end(), [](const Frame& f) { return !f.module.empty(); });
            outer != stack.end())
            callOfWork[u] = { outer->event, outer->module };
        else if (const auto range = std::find_if(stack.begin(), stack.end(),
                     [&](const Frame& f) { return trace.event(f.event).kind == EventKind::NvtxRange; });
                 range != stack.end())
            callOfWork[u] = { range->event, range->op };
        std::optional<size_t> claimed;
        for (const Frame& f : stack) {
            const FrameMatch& fm = matcher.match(f);
            if (!fm.matched)
                continue;
            auto [it, fresh] = instanceOfFrame.emplace(f.event, instances.size());
            if (fresh)
                instances.push_back({ fm.problem, fm.rule, fm.shape, fm.outside, trace.event(f.event).start, 0, {} });
            claimed = it->second;
            const TraceMatchRule& rule = catalogue[fm.problem].traceMatch[fm.rule];
            // A kernel of another problem in between (silu_and_mul: the up projection) leaves the pending op open.
            if (!rule.then.empty())
                pending[row] = { it->second, rule.then, trace.event(f.event).end, kNone };
            break;
        }
        if (!claimed) {
            auto p = pending.find(row);
            if (p != pending.end()) {
                const auto then = std::find_if(stack.begin(), stack.end(), [&](const Frame& f) {
                    return f.op == p->second.op && trace.event(f.event).start >= p->second.afterNs;
                });
                if (then != stack.end() && (p->second.frame == kNone || p->second.frame == then->event)) {
                    p->second.frame = then->event;
                    claimed = p->second.instance;
                } else {
                    pending.erase(p);
                }
            }
        }
        if (claimed) {
            Instance& in = instances[*claimed];
            in.gpuNs += g.duration();
            in.kernels.push_back(k.gpu);
            auto& grp = groups[catalogue[in.problem].name];
            grp.problem = catalogue[in.problem].name;
            const TraceMatchRule& rule = catalogue[in.problem].traceMatch[in.rule];
            grp.opClass = classOfWork[u] = ruleClass(rule);
            ++grp.kernels;
            grp.gpuNs += g.duration();
            continue;
        }
        // Not a problem's: the outermost framework op that launched it, in its innermost module.
        std::string op, module;
        for (const Frame& f : stack) {
            if (!f.module.empty())
                module = f.module;
            else if (op.empty() && (f.op.rfind("aten::", 0) == 0 || trace.opInputs(f.event)))
                op = f.op;
        }
        if (op.empty())
            op = stack.empty()            ? std::string(trace.name(g))
                : stack.back().op.empty() ? stack.back().module
                                          : stack.back().op;
        const std::string key = module.empty() ? op : op + " in " + module;
        auto& grp = groups[key];
        if (g.kind == EventKind::Kernel)
            classOfWork[u] = opClassOf(op);
        grp.opClass = classOfWork[u];
        ++grp.kernels;
        grp.gpuNs += g.duration();
    }

    for (const auto& [name, g] : groups)
        w.groups.push_back(
            { name, g.opClass, g.problem, g.kernels, g.gpuNs, w.gpuNs ? double(g.gpuNs) / double(w.gpuNs) : 0 });
    std::sort(w.groups.begin(), w.groups.end(), [](const OpGroup& a, const OpGroup& b) { return a.gpuNs > b.gpuNs; });
    if (w.groups.size() > opts.topGroups)
        w.groups.resize(opts.topGroups);

    // Phases: the outermost module calls (a model's forward passes), else the outermost ranges, on the launching
    // threads; consecutive calls of one name and one class merge.
    struct Call {
        uint32_t frame = kNone;
        std::string name;
        std::vector<size_t> uses; // indices into work
    };
    std::vector<Call> calls;
    {
        std::map<uint32_t, size_t> callOfFrame;
        for (size_t u = 0; u < work.size(); ++u) {
            const auto& [frame, name] = callOfWork[u];
            if (frame == kNone)
                continue;
            auto [it, fresh] = callOfFrame.emplace(frame, calls.size());
            if (fresh)
                calls.push_back({ frame, name, {} });
            calls[it->second].uses.push_back(u);
        }
        std::sort(calls.begin(), calls.end(),
            [&](const Call& a, const Call& b) { return trace.event(a.frame).start < trace.event(b.frame).start; });
    }
    std::vector<int> phaseOfInstance(instances.size(), -1);
    {
        std::unordered_map<uint32_t, size_t> instanceOfKernel;
        for (size_t i = 0; i < instances.size(); ++i)
            for (uint32_t k : instances[i].kernels)
                instanceOfKernel[k] = i;
        const double ridge = ceil.dramBytesPerSec > 0 ? ceil.tensorFlopsPerSec / ceil.dramBytesPerSec : 100;
        struct Classed {
            std::string bound, dominant, target, dominantProblem;
            double busy = 0;
            int64_t gpuNs = 0, start = 0, end = 0;
            std::vector<size_t> instances;
        };
        auto classify = [&](const Call& c) {
            Classed out;
            std::map<std::string, int64_t> byClass;
            std::map<std::string, int64_t> byProblem;
            double flops = 0, bytes = 0;
            int64_t lo2 = 0, hi2 = 0;
            bool first = true;
            for (size_t u : c.uses) {
                const Event& g = trace.event(work[u].gpu);
                out.gpuNs += g.duration();
                lo2 = first ? g.start : std::min(lo2, g.start);
                hi2 = first ? g.end : std::max(hi2, g.end);
                first = false;
                if (auto it = instanceOfKernel.find(work[u].gpu); it != instanceOfKernel.end()) {
                    const Instance& in = instances[it->second];
                    byProblem[catalogue[in.problem].name] += g.duration();
                    if (std::find(out.instances.begin(), out.instances.end(), it->second) == out.instances.end())
                        out.instances.push_back(it->second);
                }
                byClass[classOfWork[u]] += g.duration();
            }
            out.start = lo2;
            out.end = hi2;
            out.busy = hi2 > lo2 ? double(out.gpuNs) / double(hi2 - lo2) : 1;
            std::string top;
            int64_t topNs = -1;
            for (const auto& [cls, ns] : byClass)
                if (ns > topNs) {
                    top = cls;
                    topNs = ns;
                }
            out.dominant = top + " " + pct(out.gpuNs ? double(topNs) / double(out.gpuNs) : 0);
            for (size_t i : out.instances) {
                const Instance& in = instances[i];
                const TraceMatchRule& rule = catalogue[in.problem].traceMatch[in.rule];
                if (ruleClass(rule) != top)
                    continue;
                const Bindings b = in.shape.bindings();
                try {
                    flops += catalogue[in.problem].flops.evaluate(b);
                    bytes += catalogue[in.problem].bytes.evaluate(b);
                } catch (const ExprError&) {
                }
            }
            int64_t bestNs = -1;
            for (const auto& [p, ns] : byProblem)
                if (ns > bestNs) {
                    out.dominantProblem = p;
                    bestNs = ns;
                }
            if (out.busy < opts.launchBoundBusy) {
                out.bound = "launch-bound";
                out.target = "the GPU idles between " + std::to_string(c.uses.size())
                    + " launches per call: a CUDA graph of the call, or fewer, fused kernels; a faster kernel alone "
                      "saves little wall time here";
            } else if (top == "gemm" && (bytes <= 0 || flops / bytes >= ridge)) {
                out.bound = "compute-bound";
                out.target = "the GEMMs (" + out.dominant + " of GPU time): tensor-core throughput at these shapes";
            } else if (top == "gemm" || top == "attention" || top == "norm" || top == "softmax" || top == "activation"
                || top == "elementwise" || top == "copy") {
                out.bound = "memory-bound";
                out.target = top + " (" + out.dominant + "): bytes moved per call, fused reads and writes";
            } else {
                out.bound = "mixed";
                out.target = out.dominant + " of GPU time";
            }
            if (!out.dominantProblem.empty() && out.bound != "launch-bound")
                out.target += "; tunable: " + out.dominantProblem;
            return out;
        };
        for (const Call& c : calls) {
            Classed k = classify(c);
            // One phase holds calls of one kind: same name, class and launches, and GPU time within 1.5x of the
            // phase's mean (a prefill and the decode steps after it launch the same kernels at other sizes).
            const auto sameKind = [&](const WorkloadPhase& ph) {
                const double mean = double(ph.gpuNs) / double(ph.calls);
                return ph.bound == k.bound && ph.label.rfind(c.name, 0) == 0 && ph.kernels == ph.calls * c.uses.size()
                    && double(k.gpuNs) <= 1.5 * mean && 1.5 * double(k.gpuNs) >= mean;
            };
            if (!w.phases.empty() && sameKind(w.phases.back())) {
                WorkloadPhase& ph = w.phases.back();
                ++ph.calls;
                ph.label = c.name + " x" + std::to_string(ph.calls);
                ph.kernels += c.uses.size();
                ph.gpuNs += k.gpuNs;
                ph.endNs = std::max(ph.endNs, k.end);
                const double window = double(ph.endNs - ph.startNs);
                ph.busyPct = window > 0 ? 100.0 * double(ph.gpuNs) / window : 100;
            } else {
                WorkloadPhase ph;
                ph.label = c.name;
                ph.bound = k.bound;
                ph.dominant = k.dominant;
                ph.target = k.target;
                ph.calls = 1;
                ph.kernels = c.uses.size();
                ph.startNs = k.start;
                ph.endNs = k.end;
                ph.gpuNs = k.gpuNs;
                ph.busyPct = 100 * k.busy;
                w.phases.push_back(std::move(ph));
            }
            for (size_t i : k.instances)
                phaseOfInstance[i] = static_cast<int>(w.phases.size() - 1);
        }
        if (calls.empty() && !work.empty())
            w.notes.push_back("no module calls or ranges around the launches: phases need a trace recorded with "
                              "with_stack=True (nn.Module ranges) or NVTX ranges");
    }

    // Tunable operations, by problem and shape.
    std::map<std::string, TunableOp> byProblem;
    for (size_t i = 0; i < instances.size(); ++i) {
        const Instance& in = instances[i];
        const Problem& p = catalogue[in.problem];
        TunableOp& t = byProblem[p.name];
        t.problem = p.name;
        const TraceMatchRule& rule = p.traceMatch[in.rule];
        if (t.rule.find(rule.describe()) == std::string::npos)
            t.rule += (t.rule.empty() ? "" : ", ") + rule.describe();
        t.opClass = ruleClass(rule);
        ++t.calls;
        t.gpuNs += in.gpuNs;
        auto s = std::find_if(
            t.shapes.begin(), t.shapes.end(), [&](const WorkloadShape& ws) { return ws.shape == in.shape; });
        if (s == t.shapes.end()) {
            WorkloadShape ws;
            ws.shape = in.shape;
            ws.outside = in.outside;
            const Bindings b = in.shape.bindings();
            try {
                ws.flopsPerCall = p.flops.evaluate(b);
                ws.bytesPerCall = p.bytes.evaluate(b);
            } catch (const ExprError&) {
            }
            t.shapes.push_back(std::move(ws));
            s = t.shapes.end() - 1;
        }
        ++s->calls;
        s->gpuNs += in.gpuNs;
        if (phaseOfInstance[i] >= 0 && w.phases[static_cast<size_t>(phaseOfInstance[i])].bound == "launch-bound")
            s->launchBoundNs += in.gpuNs;
    }
    for (auto& [name, t] : byProblem) {
        for (auto& s : t.shapes) {
            s.share = w.gpuNs ? double(s.gpuNs) / double(w.gpuNs) : 0;
            if (s.outside.empty())
                t.fittingNs += s.gpuNs;
        }
        std::sort(t.shapes.begin(), t.shapes.end(),
            [](const WorkloadShape& a, const WorkloadShape& b) { return a.gpuNs > b.gpuNs; });
        t.share = w.gpuNs ? double(t.gpuNs) / double(w.gpuNs) : 0;
        w.tunableNs += t.fittingNs;
        w.tunable.push_back(std::move(t));
    }
    std::sort(
        w.tunable.begin(), w.tunable.end(), [](const TunableOp& a, const TunableOp& b) { return a.gpuNs > b.gpuNs; });
    if (w.opsWithShapes == 0 && !work.empty())
        w.notes.push_back("the trace records no op input shapes: profile with record_shapes=True (PyTorch) or "
                          "emit_nvtx(record_shapes=True) so operations can be matched to problems");
    return w;
}

std::vector<Shape> tuningShapesFromWorkload(
    const Workload& w, const Problem& problem, const std::string& tracePath, size_t maxShapes)
{
    const TunableOp* op = w.tunableFor(problem.name);
    if (!op) {
        std::string rules;
        for (const auto& r : problem.traceMatch)
            rules += (rules.empty() ? "" : ", ") + r.describe();
        throw InputError(tracePath + ": no operation of the trace fits problem " + problem.name
            + (rules.empty() ? " (its problem.json has no \"trace_match\" rules)" : " (its rules: " + rules + ")"));
    }
    std::vector<Shape> out;
    for (const auto& s : op->shapes) {
        if (!s.outside.empty() || s.gpuNs <= 0 || out.size() >= maxShapes)
            continue;
        Shape shape = s.shape;
        shape.weight = double(s.gpuNs) / double(std::max<int64_t>(op->fittingNs, 1));
        out.push_back(std::move(shape));
    }
    if (out.empty()) {
        std::string why;
        for (size_t i = 0; i < op->shapes.size() && i < 3; ++i)
            why += (why.empty() ? "" : "; ") + op->shapes[i].shape.label() + ": " + op->shapes[i].outside;
        throw InputError(tracePath + ": every shape of " + problem.name
            + " in the trace is outside its validity range (" + why + ")");
    }
    return out;
}

Projection projectGain(const Workload& w, const std::string& problem, const std::string& candidate,
    const std::vector<ShapeResult>& measured)
{
    Projection p;
    p.problem = problem;
    p.candidate = candidate;
    const TunableOp* op = w.tunableFor(problem);
    if (!op)
        return p;
    p.opNs = op->gpuNs;
    for (const auto& s : op->shapes) {
        ProjectedShape ps;
        ps.shape = s.shape;
        ps.gpuNs = s.gpuNs;
        for (const auto& m : measured)
            if (!m.heldOut && m.shape == s.shape && m.speedup > 0) {
                ps.speedup = m.speedup;
                ps.measured = true;
            }
        const double saved = double(s.gpuNs) * (1 - 1 / ps.speedup);
        ps.savedNs = static_cast<int64_t>(std::llround(saved));
        p.savedNs += ps.savedNs;
        p.savedOutsideLaunchBoundNs
            += static_cast<int64_t>(std::llround(double(s.gpuNs - s.launchBoundNs) * (1 - 1 / ps.speedup)));
        p.shapes.push_back(std::move(ps));
    }
    p.kernelSavingPct = w.gpuNs ? 100.0 * double(p.savedNs) / double(w.gpuNs) : 0;
    p.endToEndPct = w.windowNs ? 100.0 * double(p.savedOutsideLaunchBoundNs) / double(w.windowNs) : 0;
    p.upperBoundPct = w.windowNs ? 100.0 * double(p.savedNs) / double(w.windowNs) : 0;
    return p;
}

nlohmann::json toJson(const Workload& w)
{
    nlohmann::json tunable = nlohmann::json::array();
    for (const auto& t : w.tunable) {
        nlohmann::json shapes = nlohmann::json::array();
        for (const auto& s : t.shapes) {
            nlohmann::json j = { { "dims", s.shape.dims }, { "calls", s.calls }, { "gpu_ns", s.gpuNs },
                { "share", s.share }, { "launch_bound_ns", s.launchBoundNs }, { "fits", s.outside.empty() } };
            if (!s.outside.empty())
                j["outside"] = s.outside;
            if (s.gpuNs > 0 && s.calls > 0) {
                const double perCall = double(s.gpuNs) / double(s.calls) * 1e-9;
                j["achieved_bytes_per_s"] = s.bytesPerCall / perCall;
                j["achieved_flops_per_s"] = s.flopsPerCall / perCall;
            }
            shapes.push_back(std::move(j));
        }
        tunable.push_back({ { "problem", t.problem }, { "rule", t.rule }, { "class", t.opClass }, { "calls", t.calls },
            { "gpu_ns", t.gpuNs }, { "fitting_ns", t.fittingNs }, { "share", t.share }, { "shapes", shapes } });
    }
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : w.groups) {
        nlohmann::json j = { { "name", g.name }, { "class", g.opClass }, { "kernels", g.kernels },
            { "gpu_ns", g.gpuNs }, { "share", g.share } };
        if (!g.problem.empty())
            j["problem"] = g.problem;
        groups.push_back(std::move(j));
    }
    nlohmann::json phases = nlohmann::json::array();
    for (const auto& ph : w.phases)
        phases.push_back({ { "label", ph.label }, { "bound", ph.bound }, { "dominant", ph.dominant },
            { "target", ph.target }, { "calls", ph.calls }, { "kernels", ph.kernels }, { "start_ns", ph.startNs },
            { "end_ns", ph.endNs }, { "gpu_ns", ph.gpuNs }, { "busy_pct", ph.busyPct } });
    return { { "gpu_ns", w.gpuNs }, { "window_ns", w.windowNs }, { "tunable_ns", w.tunableNs },
        { "ops_with_shapes", w.opsWithShapes }, { "tunable", tunable }, { "operations", groups }, { "phases", phases },
        { "notes", w.notes } };
}

nlohmann::json toJson(const Projection& p)
{
    nlohmann::json shapes = nlohmann::json::array();
    for (const auto& s : p.shapes)
        shapes.push_back({ { "dims", s.shape.dims }, { "gpu_ns", s.gpuNs }, { "speedup", s.speedup },
            { "measured", s.measured }, { "saved_ns", s.savedNs } });
    return { { "problem", p.problem }, { "candidate", p.candidate }, { "op_ns", p.opNs }, { "saved_ns", p.savedNs },
        { "saved_outside_launch_bound_ns", p.savedOutsideLaunchBoundNs }, { "kernel_saving_pct", p.kernelSavingPct },
        { "end_to_end_pct", p.endToEndPct }, { "upper_bound_pct", p.upperBoundPct }, { "shapes", shapes } };
}

std::string toText(const Workload& w)
{
    std::string s;
    char buf[512];
    if (!w.tunable.empty()) {
        std::snprintf(buf, sizeof buf, "Tunable operations (%s of %s GPU time at shapes a problem fits):\n",
            pct(w.gpuNs ? double(w.tunableNs) / double(w.gpuNs) : 0).c_str(), formatNs(double(w.gpuNs)).c_str());
        s += buf;
        for (const auto& t : w.tunable) {
            std::snprintf(buf, sizeof buf, "  %-18s %6s  %5llu calls  %-11s  by %s\n", t.problem.c_str(),
                pct(t.share).c_str(), static_cast<unsigned long long>(t.calls), formatNs(double(t.gpuNs)).c_str(),
                t.rule.c_str());
            s += buf;
            for (size_t i = 0; i < t.shapes.size() && i < 6; ++i) {
                const auto& sh = t.shapes[i];
                std::snprintf(buf, sizeof buf, "      %-40s %6s  %5llu calls%s%s\n", sh.shape.label().c_str(),
                    pct(sh.share).c_str(), static_cast<unsigned long long>(sh.calls),
                    sh.outside.empty() ? "" : "  outside: ", sh.outside.c_str());
                s += buf;
            }
            if (t.shapes.size() > 6)
                s += "      (" + std::to_string(t.shapes.size() - 6) + " more shapes)\n";
        }
    }
    if (!w.phases.empty()) {
        s += "Phases:\n";
        for (const auto& ph : w.phases) {
            std::snprintf(buf, sizeof buf, "  %-28s %-13s GPU busy %5.1f%%  %s; %s\n", ph.label.c_str(),
                ph.bound.c_str(), ph.busyPct, ph.dominant.c_str(), ph.target.c_str());
            s += buf;
        }
    }
    for (const auto& n : w.notes)
        s += "note: " + n + "\n";
    return s;
}

std::string toText(const Projection& p)
{
    char buf[400];
    int measured = 0;
    for (const auto& s : p.shapes)
        measured += s.measured;
    std::snprintf(buf, sizeof buf,
        "Projection for %s (candidate %s, measured at %d of %zu shapes): saves %s of kernel time (%.2f%% of GPU "
        "work); end to end %.2f%% of the GPU window (%.2f%% if launch-bound phases also gained)\n",
        p.problem.c_str(), p.candidate.c_str(), measured, p.shapes.size(), formatNs(double(p.savedNs)).c_str(),
        p.kernelSavingPct, p.endToEndPct, p.upperBoundPct);
    return buf;
}

} // namespace kl::prof
