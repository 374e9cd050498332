#include "core/loop_device_limits.h"

#include <algorithm>
#include <string>

namespace kl {

namespace {

    std::optional<std::int64_t> tryEval(const Expr& e, const Bindings& b)
    {
        if (e.empty())
            return std::nullopt;
        try {
            return e.evaluateInt(b);
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }

    VerdictReason reason(const std::string& rule, const std::string& msg, int line)
    {
        return VerdictReason { rule, msg, line, true };
    }

    // The constraints that name ARCH, evaluated on this architecture; those naming a dim are checked per shape.
    std::optional<VerdictReason> checkArch(const KernelSpec& spec, const std::vector<Bindings>& bindingSets, int arch)
    {
        for (const ConstraintSpec& c : spec.constraints) {
            const auto ids = c.expr.identifiers();
            if (std::find(ids.begin(), ids.end(), kArchIdentifier) == ids.end())
                continue;
            for (Bindings b : bindingSets) {
                b[kArchIdentifier] = arch;
                if (!std::all_of(ids.begin(), ids.end(), [&](const std::string& id) { return b.count(id) > 0; }))
                    continue;
                bool holds = false;
                try {
                    holds = c.expr.evaluateBool(b);
                } catch (const ExprError&) {
                }
                if (!holds)
                    return reason("device.arch",
                        "constraint '" + c.expr.text() + "' (line " + std::to_string(c.line) + ") does not hold on "
                            + archName(arch) + " (" + kArchIdentifier + " = " + std::to_string(arch) + ")",
                        c.line);
            }
        }
        return std::nullopt;
    }

    // Registers are allocated per warp in units of 256 (sm_70 .. sm_90).
    std::int64_t registersPerBlock(int regsPerThread, std::int64_t threads, int warpSize)
    {
        const std::int64_t warps = (threads + warpSize - 1) / warpSize;
        const std::int64_t perWarp = (static_cast<std::int64_t>(regsPerThread) * warpSize + 255) / 256 * 256;
        return warps * perWarp;
    }

} // namespace

std::vector<Shape> shapesOf(const Problem& p)
{
    std::vector<Shape> out;
    for (const auto* list : { &p.tuningShapes, &p.verifyShapes })
        for (const Shape& s : *list)
            if (std::find(out.begin(), out.end(), s) == out.end())
                out.push_back(s);
    return out;
}

std::optional<VerdictReason> checkDeviceLimits(const KernelSpec& spec, const ParamValues& params,
    const std::vector<Shape>& shapes, const DeviceInfo& device, const CompileReport* compile)
{
    std::vector<Bindings> bindingSets;
    for (const Shape& s : shapes)
        bindingSets.push_back(bindingsFor(params, s.bindings()));
    if (bindingSets.empty())
        bindingSets.push_back(bindingsFor(params, {}));
    if (const int arch = archNumber(device); arch > 0)
        if (auto why = checkArch(spec, bindingSets, arch))
            return why;

    const std::int64_t smemLimit = device.sharedPerBlockOptin > 0 ? device.sharedPerBlockOptin : device.sharedPerBlock;
    for (const LaunchStep& step : spec.launches) {
        const CompileReport::KernelResources* res = nullptr;
        if (compile)
            for (const auto& k : compile->kernels)
                if (k.kernel == step.kernel || compile->kernels.size() == 1)
                    res = &k;
        for (std::size_t si = 0; si < bindingSets.size(); ++si) {
            const Bindings& b = bindingSets[si];
            const std::string where = step.kernel + (shapes.empty() ? "" : " at " + shapes[si].label());
            bool launched = true; // a grid of 0 in some dimension: the launch is not made, nothing else applies
            for (int d = 0; d < 3; ++d) {
                if (step.grid[d].empty())
                    continue;
                const auto g = tryEval(step.grid[d], b);
                const std::int64_t limit = d == 0 ? 2147483647LL : 65535;
                if (g && (*g < 0 || *g > limit))
                    return reason("device.grid-dims",
                        where + ": grid dimension " + std::to_string(d) + " = " + std::to_string(*g) + " is outside 0.."
                            + std::to_string(limit),
                        step.line);
                launched = launched && (!g || *g > 0);
            }
            if (!launched)
                continue;
            std::int64_t block[3] = { 1, 1, 1 };
            bool blockKnown = true;
            for (int d = 0; d < 3; ++d) {
                if (step.block[d].empty())
                    continue;
                if (auto v = tryEval(step.block[d], b))
                    block[d] = *v;
                else
                    blockKnown = false;
            }
            if (blockKnown) {
                const std::int64_t threads = block[0] * block[1] * block[2];
                if (block[0] < 1 || block[1] < 1 || block[2] < 1 || block[0] > 1024 || block[1] > 1024 || block[2] > 64)
                    return reason("device.block-dims",
                        where + ": block (" + std::to_string(block[0]) + ", " + std::to_string(block[1]) + ", "
                            + std::to_string(block[2]) + ") is outside (1..1024, 1..1024, 1..64)",
                        step.line);
                if (device.maxThreadsPerBlock > 0 && threads > device.maxThreadsPerBlock)
                    return reason("device.threads-per-block",
                        where + ": " + std::to_string(threads) + " threads per block > device limit "
                            + std::to_string(device.maxThreadsPerBlock),
                        step.line);
                if (res && res->maxThreadsPerBlock > 0 && threads > res->maxThreadsPerBlock)
                    return reason("device.registers",
                        where + ": " + std::to_string(threads) + " threads per block > "
                            + std::to_string(res->maxThreadsPerBlock) + " the compiled kernel can launch ("
                            + std::to_string(res->registers) + " registers per thread)",
                        step.line);
                if (res && device.regsPerBlock > 0 && res->registers > 0) {
                    const std::int64_t regs = registersPerBlock(res->registers, threads, std::max(device.warpSize, 1));
                    if (regs > device.regsPerBlock)
                        return reason("device.registers",
                            where + ": " + std::to_string(res->registers) + " registers x " + std::to_string(threads)
                                + " threads needs " + std::to_string(regs) + " registers per block > device limit "
                                + std::to_string(device.regsPerBlock),
                            step.line);
                }
            }
            if (smemLimit > 0) {
                std::int64_t smem = tryEval(step.sharedBytes, b).value_or(0);
                if (res)
                    smem += res->staticSharedBytes;
                if (smem > smemLimit)
                    return reason("device.shared-memory",
                        where + ": " + std::to_string(smem) + " bytes of shared memory per block > device limit "
                            + std::to_string(smemLimit),
                        step.line);
            }
        }
    }
    return std::nullopt;
}

} // namespace kl
