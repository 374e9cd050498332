// The bundle's test, PyTorch and build files.
#include "core/errors.h"
#include "kernels/export/bundle_gen.h"
#include "kernels/export/c_expr.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace kl::exporter::detail {

namespace {

    std::string fmtDouble(double v)
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g", v);
        std::string s = buf;
        if (s.find_first_of(".eEni") == std::string::npos)
            s += ".0";
        return s;
    }

    std::string replaceAll(std::string s, const std::string& from, const std::string& to)
    {
        std::size_t pos = 0;
        while ((pos = s.find(from, pos)) != std::string::npos) {
            s.replace(pos, from.size(), to);
            pos += to.size();
        }
        return s;
    }

    std::string dimVar(const std::string& d)
    {
        return "kl_d_" + cIdent(d);
    }

    IdentifierMap dimsOnly(const Problem& p)
    {
        return [&p](const std::string& name) -> std::string {
            if (p.dim(name))
                return dimVar(name);
            throw InputError("shape of problem '" + p.name + "': '" + name + "' is not a dim");
        };
    }

    std::string dimLocals(const Problem& p, const std::string& dimsPtr, const std::string& indent)
    {
        std::string s;
        for (const auto& d : p.dims)
            s += indent + "const double " + dimVar(d.name) + " = (double)" + dimsPtr + "->" + cIdent(d.name)
                + "; (void)" + dimVar(d.name) + ";\n";
        return s;
    }

    const char* kindName(DType t)
    {
        switch (t) {
        case DType::F32:
            return "KL_F32";
        case DType::F16:
            return "KL_F16";
        case DType::BF16:
            return "KL_BF16";
        case DType::F64:
            return "KL_F64";
        case DType::I32:
            return "KL_I32";
        case DType::I64:
            return "KL_I64";
        case DType::U8:
            return "KL_U8";
        case DType::FP8E4M3:
            return "KL_FP8";
        }
        return "KL_F32";
    }

    std::string torchType(DType t)
    {
        switch (t) {
        case DType::F32:
            return "at::kFloat";
        case DType::F16:
            return "at::kHalf";
        case DType::BF16:
            return "at::kBFloat16";
        case DType::F64:
            return "at::kDouble";
        case DType::I32:
            return "at::kInt";
        case DType::I64:
            return "at::kLong";
        case DType::U8:
            return "at::kByte";
        case DType::FP8E4M3:
            return "at::kFloat8_e4m3fn";
        }
        return "at::kFloat";
    }

    // Shapes whose dispatch is checked: region corners and their outside neighbours, every measured shape, and
    // each dim just outside the problem's range.
    std::vector<Shape> probeShapes(const BundleModel& m)
    {
        const auto& plan = m.plan->dispatch;
        const Problem& p = *m.problem;
        std::set<Shape> out;
        auto add = [&](std::map<std::string, std::int64_t> dims) {
            Shape s;
            s.dims = std::move(dims);
            for (const auto& [k, v] : s.dims)
                if (v < 0)
                    return;
            out.insert(s);
        };
        for (const auto& r : plan.candidateRegions) {
            std::map<std::string, std::int64_t> lo, hi;
            for (std::size_t d = 0; d < plan.dims.size(); ++d) {
                lo[plan.dims[d]] = r.ranges[d].lo;
                hi[plan.dims[d]] = r.ranges[d].hi;
            }
            add(lo);
            add(hi);
            for (const auto& dn : plan.dims) {
                auto below = lo;
                below[dn] -= 1;
                add(below);
                auto above = hi;
                above[dn] += 1;
                add(above);
            }
        }
        for (const auto& pt : plan.points)
            add(pt.shape.dims);
        std::map<std::string, std::int64_t> base;
        for (const auto& d : p.dims)
            base[d.name] = d.min;
        for (const auto& d : p.dims) {
            auto below = base;
            below[d.name] = d.min - 1;
            add(below);
            auto above = base;
            above[d.name] = d.max + 1;
            add(above);
        }
        return { out.begin(), out.end() };
    }

    std::string expectationTable(const BundleModel& m, const std::string& name)
    {
        const auto& plan = m.plan->dispatch;
        std::ostringstream o;
        const auto shapes = probeShapes(m);
        o << "/* Expected dispatch, computed by the exporter independently of this file's implementation. */\n";
        o << "static const struct { long long v[" << std::max<std::size_t>(plan.dims.size(), 1) << "]; int expected; } "
          << name << "[] = {\n";
        for (const auto& s : shapes) {
            o << "    {{";
            for (std::size_t d = 0; d < plan.dims.size(); ++d)
                o << (d ? ", " : "") << s.dims.at(plan.dims[d]) << "LL";
            if (plan.dims.empty())
                o << "0";
            o << "}, " << expectedSelection(m, s) << "}, /* " << s.label() << " */\n";
        }
        if (shapes.empty())
            o << "    {{0}, -2}\n";
        o << "};\nstatic const int " << name << "_count = " << shapes.size() << ";\n";
        return o.str();
    }

    std::string setDims(const BundleModel& m, const std::string& dst, const std::string& src)
    {
        std::string s;
        for (std::size_t d = 0; d < m.plan->dispatch.dims.size(); ++d)
            s += dst + "." + cIdent(m.plan->dispatch.dims[d]) + " = " + src + "[" + std::to_string(d) + "]; ";
        return s;
    }

    // The candidate's tensor-map geometry at each probe shape, computed with core's resolveTensorMap (what the
    // harness encoded), for the C re-statement of its rules in the dispatcher to be checked against.
    std::string tensorMapExpectations(const BundleModel& m, const std::string& name)
    {
        const auto& plan = m.plan->dispatch;
        const auto& maps = m.cand.spec.tensorMaps;
        std::ostringstream o;
        o << "/* Expected tensor maps, computed by the exporter with the harness's rules (ok 0: refused). */\n";
        o << "static const struct {\n    long long v[" << std::max<std::size_t>(plan.dims.size(), 1)
          << "];\n    int map, ok, rank;\n    unsigned long long dim[5], stride[4];\n    unsigned box[5], es[5];\n} "
          << name << "[] = {\n";
        int rows = 0;
        for (const auto& s : probeShapes(m)) {
            for (std::size_t i = 0; i < maps.size(); ++i) {
                TensorMapGeometry g;
                bool ok = true;
                try {
                    g = resolveTensorMap(maps[i], *m.problem, bindingsFor(m.cand.params, s.bindings()));
                } catch (const InputError&) {
                    ok = false;
                }
                const auto list = [&](const auto* a, int n) {
                    std::string l = "{";
                    for (int d = 0; d < std::max(n, 1); ++d)
                        l += (d ? ", " : "") + std::to_string(ok && d < n ? a[d] : 0) + "u";
                    return l + "}";
                };
                o << "    {{";
                for (std::size_t d = 0; d < plan.dims.size(); ++d)
                    o << (d ? ", " : "") << s.dims.at(plan.dims[d]) << "LL";
                o << "}, " << i << ", " << ok << ", " << (ok ? g.rank : 0) << ", " << list(g.globalDim, g.rank) << ", "
                  << list(g.globalStrideBytes, g.rank - 1) << ", " << list(g.box, g.rank) << ", "
                  << list(g.elementStrides, g.rank) << "}, /* " << maps[i].name << " at " << s.label() << " */\n";
                ++rows;
            }
        }
        o << "};\nstatic const int " << name << "_count = " << rows << ";\n";
        return o.str();
    }

} // namespace

std::string genDispatchTest(const BundleModel& m)
{
    const std::string& P = m.prefix;
    const std::string& U = m.upper;
    std::ostringstream o;
    o << "/* dispatch_test.c: checks on the CPU that the dispatcher sends every probe shape where the exporter\n"
         "   expects (the candidate only inside its verified-and-faster regions; the fallback elsewhere). */\n";
    o << "#include \"" << P << "_dispatch.h\"\n\n#include <stdio.h>\n\n";
    o << expectationTable(m, "kl_expect");
    if (!m.cand.spec.tensorMaps.empty())
        o << tensorMapExpectations(m, "kl_maps");
    o << "\nint main(void)\n{\n    int i, failures = 0, n = 0;\n    " << P << "_dims d;\n";
    o << "    printf(\"dispatch table: %d region(s) for the candidate\\n\", " << P << "_region_count());\n";
    o << "    for (i = 0; i < kl_expect_count; ++i) {\n        const char* why = NULL;\n        int got;\n        ";
    o << setDims(m, "d", "kl_expect[i].v") << "\n";
    o << "        got = " << P << "_select_why(&d, &why);\n        ++n;\n";
    o << "        if (got != kl_expect[i].expected) {\n            ++failures;\n            printf(\"FAIL probe %d: "
         "got %d, expected %d (%s)\\n\", i, got, "
         "kl_expect[i].expected, why ? why : \"\");\n        }\n    }\n";
    o << "    (void)" << U << "_IMPL_NONE;\n";
    o << "    printf(\"%d of %d probe shapes dispatched as expected\\n\", n - failures, n);\n";
    if (!m.cand.spec.tensorMaps.empty()) {
        o << "    for (i = 0; i < kl_maps_count; ++i) {\n        const char* why = NULL;\n        " << P
          << "_tensor_map g;\n        int ok, j, same;\n        " << setDims(m, "d", "kl_maps[i].v") << "\n";
        o << "        ok = " << P << "_candidate_tensor_map(kl_maps[i].map, &d, &g, &why);\n"
          << "        same = ok == kl_maps[i].ok && (!ok || g.rank == kl_maps[i].rank);\n"
             "        for (j = 0; same && ok && j < g.rank; ++j)\n"
             "            same = g.dim[j] == kl_maps[i].dim[j] && g.box[j] == kl_maps[i].box[j]\n"
             "                && g.element_strides[j] == kl_maps[i].es[j] && (j == 0 || g.stride_bytes[j - 1] == "
             "kl_maps[i].stride[j - 1]);\n"
             "        if (!same) {\n            ++failures;\n            printf(\"FAIL tensor map row %d: got %s, "
             "expected %s (%s)\\n\", i, ok ? \"encodable\" : \"refused\",\n"
             "                   kl_maps[i].ok ? \"encodable\" : \"refused\", why ? why : \"same geometry "
             "expected\");\n"
             "        }\n    }\n";
        o << "    printf(\"%d tensor-map probes checked against the harness's geometry\\n\", kl_maps_count);\n";
    }
    o << "    return failures ? 1 : 0;\n}\n";
    return o.str();
}

namespace {
    // The self-test's integer inputs with a value kind (core/problem.h, IntValues): the same contract as the
    // worker's kl::intInputValues, drawn from the self-test's own fresh seed.
    std::string genIntValues(const BundleModel& m)
    {
        const Problem& p = *m.problem;
        const std::string& P = m.prefix;
        std::ostringstream o;
        o << "/* 0 any, 1 range [lo, hi), 2 distinct per row in [0, hi) with -1 padding, 3 permutation, 4 lengths\n"
             "   [lo, hi] with both ends present (problem.json \"values\"). */\n";
        o << "static int valueKind(int t)\n{\n    switch (t) {\n";
        for (std::size_t i = 0; i < p.tensors.size(); ++i)
            if (p.tensors[i].values.kind != IntValues::Kind::Any)
                o << "    case " << i << ": return " << static_cast<int>(p.tensors[i].values.kind) << ";\n";
        o << "    default: return 0;\n    }\n}\n\n";
        o << "static void valueBounds(int t, const " << P
          << "_dims* dims, double* lo, double* hi, double* pad, double* row)\n{\n"
          << dimLocals(p, "dims", "    ") << "    switch (t) {\n";
        for (std::size_t i = 0; i < p.tensors.size(); ++i) {
            const TensorSpec& t = p.tensors[i];
            if (t.values.kind == IntValues::Kind::Any)
                continue;
            const std::string what = "values of " + t.name;
            o << "    case " << i << ": *lo = " << toCExpression(t.values.low.text(), dimsOnly(p), what)
              << "; *hi = " << toCExpression(t.values.high.text(), dimsOnly(p), what)
              << "; *pad = " << fmtDouble(t.values.padFraction) << "; *row = "
              << (t.shape.empty() ? std::string("0") : toCExpression(t.shape.back().text(), dimsOnly(p), what))
              << "; return;\n";
        }
        o << "    default: *lo = *hi = *pad = *row = 0; return;\n    }\n}\n\n";
        o << "static std::vector<double> intValues(int t, const " << P
          << "_dims* dims, size_t n, std::mt19937_64& rng)\n{\n    double lo, hi, pad, rowD;\n"
             "    valueBounds(t, dims, &lo, &hi, &pad, &rowD);\n"
             "    return klIntValues(valueKind(t), lo, hi, pad, rowD, n, rng);\n}\n\n";
        return o.str();
    }
} // namespace

std::string torchScalarType(DType t)
{
    return torchType(t);
}

std::string cDouble(double v)
{
    return fmtDouble(v);
}

const char* selfTestKind(DType t)
{
    return kindName(t);
}

std::string selfTestSupportC()
{
    return R"(#define KL_CHECK(x)                                                                                   \
    do {                                                                                              \
        cudaError_t kl_e = (x);                                                                       \
        if (kl_e != cudaSuccess) {                                                                    \
            std::fprintf(stderr, "CUDA error: %s at %s:%d\n", cudaGetErrorString(kl_e), __FILE__, __LINE__); \
            std::exit(1);                                                                             \
        }                                                                                             \
    } while (0)

enum Kind { KL_F32, KL_F16, KL_BF16, KL_F64, KL_I32, KL_I64, KL_U8, KL_FP8 };

static size_t kindBytes(Kind k)
{
    switch (k) {
    case KL_F64: case KL_I64: return 8;
    case KL_F32: case KL_I32: return 4;
    case KL_F16: case KL_BF16: return 2;
    default: return 1;
    }
}

static void toDevice(Kind k, const std::vector<double>& v, void* d)
{
    std::vector<unsigned char> h(v.size() * kindBytes(k));
    for (size_t i = 0; i < v.size(); ++i) {
        switch (k) {
        case KL_F32: { float x = (float)v[i]; std::memcpy(&h[i * 4], &x, 4); break; }
        case KL_F64: std::memcpy(&h[i * 8], &v[i], 8); break;
        case KL_F16: { __half x = __float2half((float)v[i]); std::memcpy(&h[i * 2], &x, 2); break; }
        case KL_BF16: { __nv_bfloat16 x = __float2bfloat16((float)v[i]); std::memcpy(&h[i * 2], &x, 2); break; }
        case KL_I32: { int32_t x = (int32_t)v[i]; std::memcpy(&h[i * 4], &x, 4); break; }
        case KL_I64: { int64_t x = (int64_t)v[i]; std::memcpy(&h[i * 8], &x, 8); break; }
        case KL_U8: h[i] = (unsigned char)v[i]; break;
        case KL_FP8: { __nv_fp8_e4m3 x((float)v[i]); std::memcpy(&h[i], &x, 1); break; }
        }
    }
    KL_CHECK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
}

static std::vector<double> fromDevice(Kind k, const void* d, size_t n)
{
    std::vector<unsigned char> h(n * kindBytes(k));
    KL_CHECK(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost));
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) {
        switch (k) {
        case KL_F32: { float x; std::memcpy(&x, &h[i * 4], 4); v[i] = x; break; }
        case KL_F64: std::memcpy(&v[i], &h[i * 8], 8); break;
        case KL_F16: { __half x; std::memcpy(&x, &h[i * 2], 2); v[i] = __half2float(x); break; }
        case KL_BF16: { __nv_bfloat16 x; std::memcpy(&x, &h[i * 2], 2); v[i] = __bfloat162float(x); break; }
        case KL_I32: { int32_t x; std::memcpy(&x, &h[i * 4], 4); v[i] = x; break; }
        case KL_I64: { int64_t x; std::memcpy(&x, &h[i * 8], 8); v[i] = (double)x; break; }
        case KL_U8: v[i] = h[i]; break;
        case KL_FP8: { __nv_fp8_e4m3 x; std::memcpy(&x, &h[i], 1); v[i] = (float)x; break; }
        }
    }
    return v;
}

struct TensorInfo {
    const char* name;
    Kind kind;
    bool output; /* written by the kernel and compared: outputs and in-place tensors */
    bool inPlace; /* filled like an input, restored before every call, compared like an output */
    double scale;
    double relL2; /* tolerance of this output's dtype */
    double maxAbs;
};

static double median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Compare {
    double relL2 = 0, maxAbs = 0;
    bool nonFinite = false;
    bool ok = true;
};

static Compare compare(const TensorInfo& t, const std::vector<double>& got, const std::vector<double>& ref)
{
    Compare c;
    double num = 0, den = 0;
    size_t finite = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (std::isfinite(ref[i]) && !std::isfinite(got[i])) {
            c.nonFinite = true;
            continue;
        }
        if (!std::isfinite(ref[i]))
            continue;
        const double e = got[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
        ++finite;
    }
    /* The harness's error measure: |c - r| / max(|r|, rms(r), 1), so cancellation to near zero in a long
       reduction is judged against the output's typical magnitude. */
    const double floorv = std::max(1.0, std::sqrt(den / (double)(finite ? finite : 1)));
    for (size_t i = 0; i < ref.size(); ++i)
        if (std::isfinite(ref[i]) && std::isfinite(got[i]))
            c.maxAbs = std::max(c.maxAbs, std::fabs(got[i] - ref[i]) / std::max(std::fabs(ref[i]), floorv));
    c.relL2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    c.ok = !c.nonFinite && c.relL2 <= t.relL2 && c.maxAbs <= t.maxAbs;
    return c;
}

/* Prints the device, or why the self-test is skipped (exit 77) when there is none. */
static bool haveDevice()
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device: self-test skipped\n");
        return false;
    }
    cudaDeviceProp prop;
    KL_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    return true;
}

/* Fresh inputs each run, printed; KL_SELFTEST_SEED repeats a run. */
static unsigned long long selfTestSeed()
{
    std::random_device rd;
    unsigned long long seed = ((unsigned long long)rd() << 32) ^ rd();
    if (const char* s = std::getenv("KL_SELFTEST_SEED"))
        seed = std::strtoull(s, nullptr, 10);
    std::printf("seed: %llu (fresh each run; KL_SELFTEST_SEED repeats one)\n", seed);
    return seed;
}

/* Shapes whose tensors and workspace exceed this many bytes are skipped (KL_SELFTEST_MAX_BYTES). */
static double selfTestMaxBytes(double fallback)
{
    const char* s = std::getenv("KL_SELFTEST_MAX_BYTES");
    return s ? std::strtod(s, nullptr) : fallback;
}

/* A floating input's values: normal with the tensor's scale (integer kinds: its magnitude, rounded). */
static std::vector<double> randomValues(const TensorInfo& t, size_t n, std::mt19937_64& rng)
{
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> h(n);
    for (auto& x : h) {
        const double r = normal(rng) * t.scale;
        x = (t.kind == KL_I32 || t.kind == KL_I64 || t.kind == KL_U8) ? std::fabs(std::round(r)) : r;
    }
    return h;
}

/* Compares one output on the device with its reference and prints the line; true when within tolerance. */
static bool checkOutput(const TensorInfo& t, const void* d, size_t n, const std::vector<double>& ref, const char* what)
{
    const Compare c = compare(t, fromDevice(t.kind, d, n), ref);
    std::printf("      %-9s %-6s rel_l2 %.3e  max_err %.3e%s  %s\n", what, t.name, c.relL2, c.maxAbs,
                c.nonFinite ? "  non-finite" : "", c.ok ? "ok" : "FAIL");
    return c.ok;
}

/* One shape's tensors on the device: inputs filled once by values(t, n), kept to restore the ones updated in place;
   reset() poisons the outputs and restores those before every call; check() compares the outputs with ref. */
struct Tensors {
    const TensorInfo* info;
    int count;
    std::vector<size_t> numel;
    std::vector<void*> buf;
    std::vector<std::vector<double>> pristine, ref;
    template <class Values>
    Tensors(const TensorInfo* i, int n, std::vector<size_t> sizes, Values values)
        : info(i), count(n), numel(std::move(sizes)), buf(n, nullptr), pristine(n), ref(n)
    {
        for (int t = 0; t < count; ++t) {
            KL_CHECK(cudaMalloc(&buf[t], std::max<size_t>(1, numel[t] * kindBytes(info[t].kind))));
            if (info[t].output && !info[t].inPlace)
                continue;
            std::vector<double> h = values(t, numel[t]);
            toDevice(info[t].kind, h, buf[t]);
            if (info[t].inPlace)
                pristine[t] = std::move(h);
        }
    }
    ~Tensors()
    {
        for (void* b : buf)
            cudaFree(b);
    }
    void reset(cudaStream_t stream) const
    {
        KL_CHECK(cudaStreamSynchronize(stream));
        for (int t = 0; t < count; ++t)
            if (info[t].inPlace)
                toDevice(info[t].kind, pristine[t], buf[t]);
            else if (info[t].output)
                KL_CHECK(cudaMemsetAsync(buf[t], 0xFF, numel[t] * kindBytes(info[t].kind), stream));
    }
    void keepReference()
    {
        for (int t = 0; t < count; ++t)
            if (info[t].output)
                ref[t] = fromDevice(info[t].kind, buf[t], numel[t]);
    }
    bool check(const char* what) const
    {
        bool ok = true;
        for (int t = 0; t < count; ++t)
            if (info[t].output)
                ok = checkOutput(info[t], buf[t], numel[t], ref[t], what) && ok;
        return ok;
    }
};

/* a and b interleaved (3 warm-up pairs, then 25 timed), so their ratio sees the same clocks: the median us of each. */
template <class A, class B>
static void timeInterleaved(A a, B b, cudaStream_t stream, cudaEvent_t* ev, double* aUs, double* bUs)
{
    for (int w = 0; w < 3; ++w) {
        a();
        b();
    }
    std::vector<float> ta, tb;
    for (int r = 0; r < 25; ++r) {
        KL_CHECK(cudaEventRecord(ev[0], stream));
        a();
        KL_CHECK(cudaEventRecord(ev[1], stream));
        b();
        KL_CHECK(cudaEventRecord(ev[2], stream));
        KL_CHECK(cudaEventSynchronize(ev[2]));
        float x = 0, y = 0;
        KL_CHECK(cudaEventElapsedTime(&x, ev[0], ev[1]));
        KL_CHECK(cudaEventElapsedTime(&y, ev[1], ev[2]));
        ta.push_back(x * 1000.0f);
        tb.push_back(y * 1000.0f);
    }
    *aUs = median(ta);
    *bUs = median(tb);
}

/* Integer input values of one kind (problem.json "values"; see valueKind) for n elements. */
static std::vector<double> klIntValues(int kind, double lo, double hi, double pad, double rowD, size_t n, std::mt19937_64& rng)
{
    std::vector<double> v(n, -1.0);
    const long long L = (long long)lo, H = (long long)hi;
    switch (kind) {
    case 1:
        for (auto& x : v) x = (double)(L + (long long)(rng() % (unsigned long long)(H - L)));
        break;
    case 4:
        for (auto& x : v) x = (double)(L + (long long)(rng() % (unsigned long long)(H - L + 1)));
        if (n >= 1) { const size_t a = rng() % n; v[a] = (double)H; if (n >= 2) v[(a + 1 + rng() % (n - 1)) % n] = (double)L; }
        break;
    case 3:
        for (size_t i = 0; i < n; ++i) v[i] = (double)i;
        std::shuffle(v.begin(), v.end(), rng);
        break;
    case 2: {
        const size_t row = rowD > 0 ? (size_t)rowD : n;
        std::vector<long long> pool;
        for (size_t start = 0; row > 0 && start + row <= n; start += row) {
            size_t valid = std::min<size_t>(row, (size_t)std::max(0LL, H));
            if (valid > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < pad) valid = rng() % valid;
            std::set<long long> chosen;
            while (chosen.size() < valid) chosen.insert((long long)(rng() % (unsigned long long)H));
            pool.assign(chosen.begin(), chosen.end());
            std::shuffle(pool.begin(), pool.end(), rng);
            for (size_t i = 0; i < pool.size(); ++i) v[start + i] = (double)pool[i];
        }
        break;
    }
    default:
        break;
    }
    return v;
}
)";
}

std::string genSelfTest(const BundleModel& m)
{
    const std::string& P = m.prefix;
    const std::string& U = m.upper;
    const Problem& p = *m.problem;
    const auto& plan = m.plan->dispatch;
    const std::size_t nd = plan.dims.size();
    std::ostringstream o;
    o << "/* selftest.cu: verifies the exported kernel against the "
      << (m.libraryFallback ? "library fallback" : "reference kernel")
      << " on fresh random inputs,\n"
         "   checks the dispatcher's choices, checks CUDA-graph capture of the dispatcher, and prints the speedup of "
         "the\n"
         "   candidate over the fallback where the dispatcher uses it. Exit 0: all passed; 77: no CUDA device. */\n";
    o << "#include \"" << P
      << ".h\"\n#include \"kl_expr.h\"\n\n#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include "
         "<cuda_fp8.h>\n#include <cuda_runtime.h>\n\n"
         "#include <algorithm>\n#include <cmath>\n#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n#include "
         "<cstring>\n"
         "#include <random>\n#include <set>\n#include <string>\n#include <vector>\n\n";
    o << selfTestSupportC();
    o << "\nstatic const TensorInfo kTensors[] = {\n";
    for (const auto& t : p.tensors) {
        const Tolerance tol = p.toleranceFor(t.dtype);
        o << "    {\"" << t.name << "\", " << kindName(t.dtype) << ", " << (writesOutput(t.role) ? "true" : "false")
          << ", " << (t.role == TensorRole::InOut ? "true" : "false") << ", " << fmtDouble(t.scale) << ", "
          << fmtDouble(tol.relL2) << ", " << fmtDouble(tol.maxAbs) << "},\n";
    }
    o << "};\n/* What the candidate returns for a shape it declines at run time; " << P
      << "_run serves it with the fallback. */\nstatic const int kDeclined = " << m.upper
      << "_ERR_UNSUPPORTED_SHAPE;\nstatic const int kNumTensors = " << p.tensors.size()
      << ";\nstatic const int kNumDims = " << nd << ";\nstatic const bool kInPlace = "
      << (std::any_of(
              p.tensors.begin(), p.tensors.end(), [](const TensorSpec& t) { return t.role == TensorRole::InOut; })
                 ? "true"
                 : "false")
      << "; /* some tensor is updated in place */\n\n";
    o << genIntValues(m);
    o << "static long long numel(int t, const " << P << "_dims* dims)\n{\n" << dimLocals(p, "dims", "    ");
    o << "    switch (t) {\n";
    for (std::size_t i = 0; i < p.tensors.size(); ++i) {
        std::string e = "1.0";
        for (const auto& s : p.tensors[i].shape)
            e = "(" + e + ") * (" + toCExpression(s.text(), dimsOnly(p), "shape of " + p.tensors[i].name) + ")";
        o << "    case " << i << ": return (long long)(" << e << ");\n";
    }
    o << "    default: return 0;\n    }\n}\n\n";
    o << "static void setDims(" << P << "_dims* d, const long long* v) { "
      << replaceAll(setDims(m, "(*d)", "v"), "(*d).", "d->") << "(void)d; (void)v; }\n\n";
    // Call one implementation with the buffers and the problem's scalar values.
    o << "/* which: 0 fallback, 1 candidate, 2 the dispatcher. */\n";
    o << "static int call(int which, const " << P
      << "_dims* d, const std::vector<void*>& b, void* ws, size_t wsBytes, cudaStream_t s)\n{\n";
    std::string args = "d";
    int ti = 0;
    for (const auto& a : apiParams(p)) {
        if (a.tensor)
            args += std::string(", ") + (a.cType == "void*" ? "" : "(const void*)") + "b[" + std::to_string(ti++) + "]";
        else
            args += ", (" + a.cType + ")" + scalarValueC(*a.scalar, "d");
    }
    args += ", ws, wsBytes, s";
    o << "    switch (which) {\n    case 0: return " << P << "_run_fallback(" << args << ");\n    case 1: return " << P
      << "_run_candidate(" << args << ");\n    default: return " << P << "_run(" << args << ");\n    }\n}\n\n";
    // Shapes.
    o << "static const long long kMeasured[][" << std::max<std::size_t>(nd, 1) << "] = {\n";
    std::set<Shape> measured;
    for (const auto& pt : plan.points)
        measured.insert(pt.shape);
    for (const auto& s : measured) {
        o << "    {";
        for (std::size_t d = 0; d < nd; ++d)
            o << (d ? ", " : "") << s.dims.at(plan.dims[d]) << "LL";
        o << "},\n";
    }
    if (measured.empty())
        o << "    {0},\n";
    o << "};\nstatic const int kNumMeasured = " << measured.size() << ";\n";
    o << "static const long long kDimMin[] = {";
    for (std::size_t d = 0; d < nd; ++d)
        o << (d ? ", " : "") << p.dims[d].min << "LL";
    o << (nd ? "" : "0") << "};\nstatic const long long kDimMax[] = {";
    for (std::size_t d = 0; d < nd; ++d)
        o << (d ? ", " : "") << p.dims[d].max << "LL";
    o << (nd ? "" : "0") << "};\nstatic const long long kDimMultiple[] = {";
    for (std::size_t d = 0; d < nd; ++d)
        o << (d ? ", " : "") << std::max<std::int64_t>(1, p.dims[d].multipleOf) << "LL";
    o << (nd ? "" : "1") << "};\n\n";
    o << expectationTable(m, "kExpect") << "\n";
    o << R"(int main()
{
    if (!haveDevice())
        return 77;
)";
    o << "    if (" << P << "_init() != " << U
      << "_OK) {\n        std::printf(\"FAIL: init\\n\");\n        return 1;\n    }\n";
    o << R"(    std::mt19937_64 rng(selfTestSeed());
    const double maxBytes = selfTestMaxBytes(512.0 * (1 << 20));

    std::vector<std::vector<long long>> shapes;
    for (int i = 0; i < kNumMeasured; ++i)
        shapes.push_back(std::vector<long long>(kMeasured[i], kMeasured[i] + kNumDims));
    /* Fresh shapes drawn log-uniformly from the problem's validity range, never seen by the session. */
    for (int drawn = 0, tries = 0; drawn < 4 && tries < 1000 && kNumDims > 0; ++tries) {
        std::vector<long long> v(kNumDims);
        for (int d = 0; d < kNumDims; ++d) {
            std::uniform_real_distribution<double> u(std::log((double)std::max(1LL, kDimMin[d])), std::log((double)kDimMax[d] + 1.0));
            long long x = kDimMin[d] > 0 ? (long long)std::exp(u(rng)) : kDimMin[d];
            x = x / kDimMultiple[d] * kDimMultiple[d];
            v[d] = std::min(std::max(x, kDimMin[d]), kDimMax[d]);
        }
)";
    o << "        " << P << "_dims d;\n        setDims(&d, v.data());\n        if (!" << P
      << "_valid(&d, nullptr))\n            continue;\n";
    o << R"(        shapes.push_back(v);
        ++drawn;
    }

    cudaStream_t stream;
    KL_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t ev[3];
    for (auto& e : ev)
        KL_CHECK(cudaEventCreate(&e));
    int failures = 0, checked = 0, skipped = 0, graphChecked = 0;
    double logSpeedupSum = 0;
    int timedShapes = 0;
    for (const auto& v : shapes) {
)";
    o << "        " << P << "_dims d;\n        setDims(&d, v.data());\n";
    o << "        std::string label;\n        for (int i = 0; i < kNumDims; ++i)\n            label += std::string(i ? "
         "\",\" : \"\") + "
      << P << "_dim_name(i) + \"=\" + std::to_string(v[i]);\n";
    o << "        const char* why = nullptr;\n        const int sel = " << P << "_select_why(&d, &why);\n";
    o << "        const bool candidateRuns = " << P << "_valid(&d, nullptr) && " << P
      << "_candidate_supports(&d, nullptr);\n";
    o << "        const size_t wsBytes = " << P << "_workspace_bytes(&d);\n";
    o << R"(        double bytes = (double)wsBytes;
        for (int t = 0; t < kNumTensors; ++t)
            bytes += (double)numel(t, &d) * (double)kindBytes(kTensors[t].kind);
        if (wsBytes == (size_t)-1 || bytes > maxBytes || sel < 0) {
            std::printf("skip  %-28s (%s)\n", label.c_str(), sel < 0 ? "no implementation" : "over KL_SELFTEST_MAX_BYTES");
            ++skipped;
            continue;
        }
        std::vector<size_t> sizes(kNumTensors);
        for (int t = 0; t < kNumTensors; ++t)
            sizes[t] = (size_t)numel(t, &d);
        Tensors tensors(kTensors, kNumTensors, sizes, [&](int t, size_t n) {
            return valueKind(t) != 0 ? intValues(t, &d, n, rng) : randomValues(kTensors[t], n, rng);
        });
        const std::vector<void*>& buf = tensors.buf;
        void* ws = nullptr;
        if (wsBytes)
            KL_CHECK(cudaMalloc(&ws, wsBytes));
        tensors.reset(stream);
        int rc = call(0, &d, buf, ws, wsBytes, stream);
        KL_CHECK(cudaStreamSynchronize(stream));
        bool ok = rc == 0;
        tensors.keepReference();
        std::printf("shape %-28s dispatch: %s (%s)\n", label.c_str(), sel == 1 ? "candidate" : "fallback", why ? why : "");
        if (rc != 0)
            std::printf("      fallback failed: %d\n", rc);
        if (candidateRuns) {
            tensors.reset(stream);
            rc = call(1, &d, buf, ws, wsBytes, stream);
            KL_CHECK(cudaStreamSynchronize(stream));
            if (rc == kDeclined)
                std::printf("      candidate declined the shape at run time (a launch limit); the dispatcher runs the fallback\n");
            else
                ok = ok && rc == 0 && tensors.check("candidate");
        }
        tensors.reset(stream);
        rc = call(2, &d, buf, ws, wsBytes, stream);
        KL_CHECK(cudaStreamSynchronize(stream));
        ok = ok && rc == 0 && tensors.check("dispatch");
        if (ok && sel == 1 && graphChecked == 0) {
            /* The dispatcher under CUDA-graph capture: no allocation, no sync, the caller's stream. */
            tensors.reset(stream);
            KL_CHECK(cudaStreamSynchronize(stream));
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            KL_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            rc = call(2, &d, buf, ws, wsBytes, stream);
            KL_CHECK(cudaStreamEndCapture(stream, &graph));
            KL_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            KL_CHECK(cudaGraphLaunch(exec, stream));
            if (!kInPlace) /* a second replay of an in-place call would update its result again */
                KL_CHECK(cudaGraphLaunch(exec, stream));
            KL_CHECK(cudaStreamSynchronize(stream));
            const bool gok = rc == 0 && tensors.check("graph");
            std::printf("      CUDA graph capture + replay of the dispatcher: %s\n", gok ? "ok" : "FAIL");
            ok = ok && gok;
            KL_CHECK(cudaGraphExecDestroy(exec));
            KL_CHECK(cudaGraphDestroy(graph));
            ++graphChecked;
        }
        if (ok && sel == 1) {
            /* Candidate and fallback interleaved in one run, so the ratio sees the same clocks. */
            double c = 0, f = 0;
            timeInterleaved([&] { call(1, &d, buf, ws, wsBytes, stream); }, [&] { call(0, &d, buf, ws, wsBytes, stream); },
                            stream, ev, &c, &f);
            std::printf("      time: candidate %.2f us, fallback %.2f us, speedup %.2fx (median of 25, warm caches)\n", c, f, f / c);
            logSpeedupSum += std::log(f / c);
            ++timedShapes;
        }
        if (!ok) {
            ++failures;
            std::printf("      FAIL\n");
        }
        ++checked;
        if (ws)
            KL_CHECK(cudaFree(ws));
    }
    int dispatchFailures = 0;
    for (int i = 0; i < kExpect_count; ++i) {
)";
    o << "        " << P << "_dims d;\n        setDims(&d, kExpect[i].v);\n        const int got = " << P
      << "_select(&d);\n";
    o << R"(        if (got != kExpect[i].expected) {
            ++dispatchFailures;
            std::printf("FAIL dispatch probe %d: got %d, expected %d\n", i, got, kExpect[i].expected);
        }
    }
    std::printf("dispatch: %d of %d probe shapes as expected (fallback outside the verified-and-faster regions)\n",
                kExpect_count - dispatchFailures, kExpect_count);
    if (timedShapes)
        std::printf("speedup over the fallback where the dispatcher uses the candidate: %.2fx geometric mean over %d shapes\n",
                    std::exp(logSpeedupSum / timedShapes), timedShapes);
    std::printf("verified %d shapes (%d skipped), %d failed\n", checked, skipped, failures);
    const bool pass = failures == 0 && dispatchFailures == 0 && checked > 0;
    std::printf("%s\n", pass ? "SELFTEST PASSED" : "SELFTEST FAILED");
    return pass ? 0 : 1;
}
)";
    return o.str();
}

std::string genTorchOp(const BundleModel& m)
{
    const std::string& P = m.prefix;
    const Problem& p = *m.problem;
    const auto params = apiParams(p);
    // Dims come from input tensor sizes where a size is NAME or c*NAME; the rest become int arguments.
    std::map<std::string, std::string> inferred; // dim -> C++ code
    for (const auto& a : params) {
        if (!a.tensor || a.output)
            continue;
        for (std::size_t ax = 0; ax < a.spec->shape.size(); ++ax) {
            LinearDim ld;
            if (asLinearDim(a.spec->shape[ax].text(), &ld) && p.dim(ld.name) && !inferred.count(ld.name))
                inferred[ld.name] = a.name + ".size(" + std::to_string(ax) + ")"
                    + (ld.factor != 1 ? " / " + std::to_string(ld.factor) : "");
        }
    }
    std::vector<std::string> explicitDims;
    for (const auto& d : p.dims)
        if (!inferred.count(d.name))
            explicitDims.push_back(d.name);
    std::vector<const TensorSpec*> outputs;
    for (const auto& a : params)
        if (a.tensor && a.output)
            outputs.push_back(a.spec);
    std::ostringstream o;
    o << "/* " << P << "_op.cpp: PyTorch custom op torch.ops." << P
      << ".run (plus run_candidate, run_fallback, select).\n"
      << " * Launches on PyTorch's current stream; the workspace comes from PyTorch's caching allocator, which is\n"
      << " * CUDA-graph safe (graph-private pools), so the op can be captured by torch.cuda.graphs / torch.compile. "
         "*/\n";
    o << "#include <ATen/ATen.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAGuard.h>\n#include "
         "<torch/library.h>\n\n";
    o << "#include <tuple>\n#include <vector>\n\n#include \"" << P << ".h\"\n#include \"kl_expr.h\"\n\n";
    o << "namespace {\n\n";
    std::string sig;
    std::string schema;
    char alias = 'a'; // each tensor updated in place is its own alias set in the schema: Tensor(a!) x
    for (const auto& a : params) {
        if (a.tensor && a.output)
            continue;
        if (!sig.empty()) {
            sig += ", ";
            schema += ", ";
        }
        if (a.tensor) {
            sig += "const at::Tensor& " + a.name;
            schema += (a.inPlace ? std::string("Tensor(") + alias++ + "!) " : std::string("Tensor ")) + a.name;
        } else if (a.scalar->dtype == DType::I32) {
            sig += "int64_t " + a.name;
            schema += "int " + a.name
                + (a.scalar->formula ? "" : "=" + std::to_string(static_cast<long long>(a.scalar->value)));
        } else {
            sig += "double " + a.name;
            schema += "float " + a.name + (a.scalar->formula ? "" : "=" + fmtDouble(a.scalar->value));
        }
    }
    for (const auto& d : explicitDims) {
        sig += (sig.empty() ? "" : ", ") + std::string("int64_t ") + cIdent(d) + "_";
        schema += (schema.empty() ? "" : ", ") + std::string("int ") + cIdent(d) + "_";
    }
    // A problem whose every result is written in place returns nothing: the op mutates its arguments.
    const std::string ret = outputs.empty() ? "void" : outputs.size() == 1 ? "at::Tensor" : "std::vector<at::Tensor>";
    const std::string schemaRet = outputs.empty() ? "()" : outputs.size() == 1 ? "Tensor" : "Tensor[]";
    o << ret << " call(int which" << (sig.empty() ? "" : ", ") << sig << ")\n{\n";
    std::string firstInput;
    for (const auto& a : params) {
        if (!a.tensor || a.output)
            continue;
        if (firstInput.empty())
            firstInput = a.name;
        o << "    TORCH_CHECK(" << a.name << ".is_cuda() && " << a.name << ".is_contiguous(), \"" << P << ": " << a.name
          << " must be a contiguous CUDA tensor\");\n";
        o << "    TORCH_CHECK(" << a.name << ".scalar_type() == " << torchType(a.spec->dtype) << ", \"" << P << ": "
          << a.name << " must be " << dtypeName(a.spec->dtype) << "\");\n";
        o << "    TORCH_CHECK(" << a.name << ".dim() == " << a.spec->shape.size() << ", \"" << P << ": " << a.name
          << " must have " << a.spec->shape.size() << " dims\");\n";
    }
    // Dims are read only after the ranks are checked, so a wrong tensor gets a clear message.
    o << "    " << P << "_dims dims;\n";
    for (const auto& d : p.dims)
        o << "    dims." << cIdent(d.name) << " = "
          << (inferred.count(d.name) ? inferred[d.name] : cIdent(d.name) + "_") << ";\n";
    o << dimLocals(p, "(&dims)", "    ");
    for (const auto& a : params) {
        if (!a.tensor || a.output)
            continue;
        for (std::size_t ax = 0; ax < a.spec->shape.size(); ++ax)
            o << "    TORCH_CHECK(" << a.name << ".size(" << ax << ") == (int64_t)("
              << toCExpression(a.spec->shape[ax].text(), dimsOnly(p), "shape") << "), \"" << P << ": " << a.name
              << ".size(" << ax << ") must be " << a.spec->shape[ax].text() << "\");\n";
    }
    if (firstInput.empty())
        throw InputError(
            "problem '" + p.name + "' has no input tensor: the PyTorch op needs one for device and stream");
    o << "    const c10::cuda::CUDAGuard guard(" << firstInput << ".device());\n";
    std::vector<std::string> outNames;
    for (const auto& a : params) {
        if (!a.tensor || !a.output)
            continue;
        o << "    at::Tensor " << a.name << " = at::empty({";
        for (std::size_t ax = 0; ax < a.spec->shape.size(); ++ax)
            o << (ax ? ", " : "") << "(int64_t)(" << toCExpression(a.spec->shape[ax].text(), dimsOnly(p), "shape")
              << ")";
        o << "}, " << firstInput << ".options().dtype(" << torchType(a.spec->dtype) << "));\n";
        outNames.push_back(a.name);
    }
    o << "    const size_t ws_bytes = " << P << "_workspace_bytes(&dims);\n";
    o << "    TORCH_CHECK(ws_bytes != (size_t)-1, \"" << P << ": no workspace size for this shape\");\n";
    o << "    at::Tensor ws = at::empty({(int64_t)(ws_bytes ? ws_bytes : 1)}, " << firstInput
      << ".options().dtype(at::kByte));\n";
    o << "    cudaStream_t stream = at::cuda::getCurrentCUDAStream();\n";
    std::string cargs = "&dims";
    for (const auto& a : params) {
        if (a.tensor)
            cargs += ", " + a.name + ".data_ptr()";
        else
            cargs += ", (" + a.cType + ")" + a.name;
    }
    cargs += ", ws.data_ptr(), ws_bytes, stream";
    o << "    int rc;\n    if (which == 0)\n        rc = " << P << "_run_fallback(" << cargs
      << ");\n    else if (which == 1)\n        rc = " << P << "_run_candidate(" << cargs
      << ");\n    else\n        rc = " << P << "_run(" << cargs << ");\n";
    o << "    TORCH_CHECK(rc == 0, \"" << P << ": \", " << P << "_error_string(rc));\n";
    if (outNames.empty())
        o << "}\n\n";
    else if (outNames.size() == 1)
        o << "    return " << outNames[0] << ";\n}\n\n";
    else {
        o << "    return {";
        for (std::size_t i = 0; i < outNames.size(); ++i)
            o << (i ? ", " : "") << outNames[i];
        o << "};\n}\n\n";
    }
    std::string fwd;
    for (const auto& a : params) {
        if (a.tensor && a.output)
            continue;
        fwd += ", " + a.name;
    }
    for (const auto& d : explicitDims)
        fwd += ", " + cIdent(d) + "_";
    for (const auto& [fn, which] :
        std::vector<std::pair<std::string, int>> { { "run", 2 }, { "run_candidate", 1 }, { "run_fallback", 0 } })
        o << ret << " op_" << fn << "(" << sig << ") { return call(" << which << fwd << "); }\n";
    o << "\n/* Which implementation the dispatcher picks for dims in the order";
    for (const auto& d : p.dims)
        o << " " << d.name;
    o << ": 1 candidate, 0 fallback, -1 none. */\n";
    o << "int64_t op_select(at::IntArrayRef v)\n{\n    TORCH_CHECK((int)v.size() == " << p.dims.size() << ", \"" << P
      << ".select: expects " << p.dims.size() << " dims\");\n    " << P << "_dims dims;\n";
    for (std::size_t d = 0; d < p.dims.size(); ++d)
        o << "    dims." << cIdent(p.dims[d].name) << " = v[" << d << "];\n";
    o << "    return " << P << "_select(&dims);\n}\n\n";
    if (m.cand.triton()) {
        o << "/* The candidate's launch grid for dims (the C launcher's), for the Triton source in " << P
          << "_triton.py. */\n";
        o << "std::vector<int64_t> op_candidate_grid(at::IntArrayRef v)\n{\n    TORCH_CHECK((int)v.size() == "
          << p.dims.size() << ", \"" << P << ".candidate_grid: expects " << p.dims.size() << " dims\");\n    " << P
          << "_dims dims;\n";
        for (std::size_t d = 0; d < p.dims.size(); ++d)
            o << "    dims." << cIdent(p.dims[d].name) << " = v[" << d << "];\n";
        o << "    long long grid[3];\n    TORCH_CHECK(" << P << "_candidate_grid(&dims, grid), \"" << P
          << ": no launch grid for these dims\");\n    return { grid[0], grid[1], grid[2] };\n}\n\n";
    }
    o << "} // namespace\n\n";
    o << "TORCH_LIBRARY(" << P << ", m)\n{\n";
    for (const auto& fn : { "run", "run_candidate", "run_fallback" })
        o << "    m.def(\"" << fn << "(" << schema << ") -> " << schemaRet << "\");\n";
    o << "    m.def(\"select(int[] dims) -> int\", &op_select);\n";
    if (m.cand.triton())
        o << "    m.def(\"candidate_grid(int[] dims) -> int[]\", &op_candidate_grid);\n";
    o << "}\n\n";
    o << "TORCH_LIBRARY_IMPL(" << P << ", CUDA, m)\n{\n";
    for (const auto& fn : { "run", "run_candidate", "run_fallback" })
        o << "    m.impl(\"" << fn << "\", &op_" << fn << ");\n";
    o << "}\n";
    return o.str();
}

std::string genTorchLoader(const BundleModel& m)
{
    const std::string& P = m.prefix;
    std::ostringstream o;
    o << "\"\"\"Loads the exported " << m.problem->name << " kernel as a PyTorch op.\n\n"
      << "    import " << P << "\n    ops = " << P
      << ".load()          # compiles with torch.utils.cpp_extension on first use\n"
      << "    y = ops.run(...)               # the dispatcher: candidate in its verified ranges, fallback elsewhere\n\n"
      << "Or build with CMake (-DKL_BUILD_TORCH=ON) and pass the library: " << P << ".load(\"build/lib" << P
      << "_torch.so\")\n"
      << "(or set " << m.upper << "_TORCH_LIBRARY).\n\"\"\"\n";
    o << "import glob\nimport os\n\nimport torch\n\n";
    o << "_HERE = os.path.dirname(os.path.abspath(__file__))\n_ROOT = os.path.dirname(_HERE)\n";
    o << "CUDA_ARCH = \"" << m.cudaArch << "\"\nDIMS = [";
    for (std::size_t d = 0; d < m.problem->dims.size(); ++d)
        o << (d ? ", " : "") << "\"" << m.problem->dims[d].name << "\"";
    o << "]\n_ops = None\n\n\n";
    o << "def load(library=None, verbose=False, build_directory=None):\n";
    o << "    \"\"\"Registers torch.ops." << P << " and returns it.\"\"\"\n";
    o << "    global _ops\n    if _ops is not None:\n        return _ops\n";
    o << "    library = library or os.environ.get(\"" << m.upper << "_TORCH_LIBRARY\")\n";
    o << "    if library:\n        torch.ops.load_library(library)\n    else:\n";
    o << "        from torch.utils.cpp_extension import load as _load\n\n";
    o << "        sources = [os.path.join(_HERE, \"" << P << "_op.cpp\"), os.path.join(_ROOT, \"src\", \"" << P
      << "_dispatch.c\")]\n";
    o << "        sources += sorted(glob.glob(os.path.join(_ROOT, \"src\", \"*.cu\")))\n";
    o << "        _load(\n            name=\"" << P << "_torch\",\n            sources=sources,\n"
      << "            extra_include_paths=[os.path.join(_ROOT, \"include\"), os.path.join(_ROOT, \"src\")],\n"
      << "            # torch's extension flags forbid implicit half/bfloat16 conversions; the kernel was verified\n"
      << "            # with them allowed (NVRTC defaults), so undo them.\n"
      << "            extra_cuda_cflags=[\n"
      << "                \"-gencode=arch=compute_\" + CUDA_ARCH + \",code=sm_\" + CUDA_ARCH,\n"
      << "                \"-U__CUDA_NO_HALF_OPERATORS__\",\n"
      << "                \"-U__CUDA_NO_HALF_CONVERSIONS__\",\n"
      << "                \"-U__CUDA_NO_BFLOAT16_CONVERSIONS__\",\n"
      << "                \"-U__CUDA_NO_HALF2_OPERATORS__\",\n"
      << "            ],\n"
      << "            extra_ldflags=" << (m.libraryFallback ? "[\"-lcublas\"]" : "[]") << ",\n"
      << "            is_python_module=False,\n            verbose=verbose,\n            "
         "build_directory=build_directory,\n        )\n";
    o << "    _ops = torch.ops." << P << "\n    return _ops\n\n\n";
    o << "def run(*args, **kwargs):\n    return load().run(*args, **kwargs)\n";
    if (m.cand.triton())
        o << "\n\ndef load_triton():\n    \"\"\"The candidate's Triton source (" << P
          << "_triton.py; needs the triton package): kl_launch(dims, args) runs it\n"
          << "    through Triton's JIT with the grid, parameters, num_warps and num_stages of the CUBIN the C library "
             "launches.\"\"\"\n"
          << "    import importlib.util\n\n    spec = importlib.util.spec_from_file_location(\"" << P
          << "_triton\", os.path.join(_HERE, \"" << P << "_triton.py\"))\n"
          << "    module = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(module)\n"
          << "    module.kl_ops = load\n    return module\n";
    return o.str();
}

std::string cudaArchCMake(const std::string& arch)
{
    return "if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)\n  # The architecture the session measured on; before project(), "
           "which would set\n  # the compiler's default (and a parent project's value reaches its subdirectories).\n"
           "  set(CMAKE_CUDA_ARCHITECTURES "
        + arch + ")\nendif()\n";
}

std::string torchCMake(const std::string& P)
{
    std::ostringstream o;
    o << "if(KL_BUILD_TORCH)\n  find_package(Python3 REQUIRED COMPONENTS Interpreter)\n"
      << "  execute_process(COMMAND ${Python3_EXECUTABLE} -c \"import torch; print(torch.utils.cmake_prefix_path)\"\n"
      << "                  OUTPUT_VARIABLE KL_TORCH_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL "
         "ANY)\n"
      << "  list(APPEND CMAKE_PREFIX_PATH ${KL_TORCH_PREFIX})\n  find_package(Torch REQUIRED)\n"
      << "  add_library(" << P << "_torch SHARED torch/" << P << "_op.cpp)\n"
      << "  target_include_directories(" << P << "_torch PRIVATE src)\n"
      << "  target_link_libraries(" << P << "_torch PRIVATE " << P << " ${TORCH_LIBRARIES})\n"
      << "  set_target_properties(" << P << " PROPERTIES POSITION_INDEPENDENT_CODE ON)\nendif()\n";
    return o.str();
}

std::string genCMake(const BundleModel& m)
{
    const std::string& P = m.prefix;
    std::ostringstream o;
    o << "# Builds the exported " << m.problem->name << " kernel as a library (lib" << P
      << "), its CPU dispatch test and\n"
      << "# its GPU self-test:  cmake -S . -B build && cmake --build build && ctest --test-dir build "
         "--output-on-failure\n";
    o << "cmake_minimum_required(VERSION 3.24)\n"
      << cudaArchCMake(m.cudaArch) << "project(" << P << " LANGUAGES C CXX CUDA)\n\n";
    o << "set(CMAKE_CUDA_STANDARD 17)\nset(CMAKE_CUDA_STANDARD_REQUIRED ON)\nset(CMAKE_CXX_STANDARD "
         "17)\nset(CMAKE_CXX_STANDARD_REQUIRED ON)\n";
    o << "option(BUILD_SHARED_LIBS \"Build lib" << P << " as a shared library\" OFF)\n";
    o << "option(KL_BUILD_TORCH \"Build the PyTorch op library (needs torch in the Python on PATH)\" OFF)\n\n";
    o << "find_package(CUDAToolkit REQUIRED)\n\n";
    if (m.cand.triton())
        o << "# The Triton candidate's launcher reaches the driver through cudaGetDriverEntryPointByVersion.\n"
             "if(CUDAToolkit_VERSION VERSION_LESS 12.5)\n  message(FATAL_ERROR \"this bundle needs CUDA 12.5 or newer "
             "(found ${CUDAToolkit_VERSION})\")\nendif()\n\n";
    o << "add_library(" << P << "\n  src/" << P << "_dispatch.c\n"
      << (m.candidate ? "  src/" + P + "_candidate.cu\n" : std::string()) << "  src/" << P << "_fallback.cu\n  src/"
      << P << "_run.cu)\n";
    o << "set_target_properties(" << P << " PROPERTIES POSITION_INDEPENDENT_CODE ON)\n";
    o << "target_include_directories(" << P
      << " PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)\n";
    o << "target_link_libraries(" << P << " PUBLIC CUDA::cudart" << (m.libraryFallback ? " CUDA::cublas" : "") << ")\n";
    o << "if(UNIX)\n  target_link_libraries(" << P << " PRIVATE m)\nendif()\n\n";
    if (!m.candidate) // a fallback-only part of a pipeline bundle: nothing to test against the fallback
        return o.str();
    o << "enable_testing()\n";
    o << "add_executable(" << P << "_dispatch_test test/dispatch_test.c src/" << P << "_dispatch.c)\n";
    o << "target_include_directories(" << P << "_dispatch_test PRIVATE include src)\n";
    o << "if(UNIX)\n  target_link_libraries(" << P << "_dispatch_test PRIVATE m)\nendif()\n";
    o << "add_test(NAME dispatch COMMAND " << P << "_dispatch_test)\n\n";
    o << "add_executable(" << P << "_selftest test/selftest.cu)\ntarget_link_libraries(" << P << "_selftest PRIVATE "
      << P << ")\n";
    // The self-test evaluates formula scalars and value bounds with the bundle's kl_expr.h.
    o << "target_include_directories(" << P << "_selftest PRIVATE src)\n";
    o << "add_test(NAME selftest COMMAND " << P << "_selftest)\n";
    o << "set_tests_properties(selftest PROPERTIES SKIP_RETURN_CODE 77)\n\n";
    o << torchCMake(P) << "\n";
    o << "install(TARGETS " << P << ")\ninstall(FILES include/" << P << ".h include/" << P
      << "_dispatch.h TYPE INCLUDE)\n";
    return o.str();
}

std::string genReadme(const BundleModel& m)
{
    const std::string& P = m.prefix;
    const auto& plan = *m.plan;
    std::ostringstream o;
    o << "# " << m.problem->name << ": exported kernel " << m.candidate->id << "\n\n";
    if (m.forced) {
        o << "> **FORCED EXPORT.** KernelLoop refused this candidate; it was exported with --force. Reasons:\n";
        for (const auto& r : plan.refusals)
            o << "> - " << r.code << ": " << r.message << "\n";
        o << "\n";
    }
    o << m.problem->description << "\n\n";
    o << "Exported by KernelLoop from session `" << m.session->id
      << "`. `manifest.json` records the lineage, hypotheses,"
      << " parameters, device, per-shape correctness and timing with confidence intervals, the referee's record and"
      << " the sha256 of every file.\n\n";
    o << "## Dispatch\n\nThe candidate runs only where it was verified and measured faster; the fallback ("
      << plan.fallbackDescription << ") serves every other shape.\n\n";
    if (plan.dispatch.candidateRegions.empty())
        o << "- no region: the candidate was never measured surely faster, so the dispatcher always uses the "
             "fallback\n";
    for (const auto& r : plan.dispatch.candidateRegions)
        o << "- candidate: " << r.label(plan.dispatch.dims) << "\n";
    for (const auto& r : plan.dispatch.lossRegions)
        o << "- fallback (measured not faster): " << r.label(plan.dispatch.dims) << "\n";
    o << "- fallback: everything else\n\n";
    o << "## Build and test\n\n```sh\ncmake -S . -B build -DCMAKE_BUILD_TYPE=Release\ncmake --build build -j\n"
         "ctest --test-dir build --output-on-failure   # dispatch (CPU) and selftest (GPU)\n```\n\n";
    o << "## C API\n\n`include/" << P << ".h`: size the workspace once with `" << P
      << "_workspace_bytes()`, then call `" << P
      << "_run()` on your stream. No allocation or synchronization happens inside, so it can be captured in a CUDA "
         "graph.\n\n";
    o << "## PyTorch\n\n```python\nimport sys; sys.path.insert(0, \"torch\")\nimport " << P << "\nops = " << P
      << ".load()\nout = ops.run(...)  # see torch/" << P << "_op.cpp for the signature\n```\n";
    if (m.cand.triton()) {
        o << "\n## Triton\n\nThe candidate is a Triton kernel. The library launches Triton " << m.cand.tritonVersion
          << "'s CUBIN (`cubin/`, embedded in `src/" << P
          << "_candidate_cubin.h`) through the CUDA driver API: no Python at run time. It runs on ";
        for (std::size_t i = 0; i < m.cand.cubins.size(); ++i)
            o << (i ? ", " : "") << m.cand.cubins[i].arch;
        o << "; on other GPUs `" << P << "_run()` uses the fallback. With the `triton` package, `torch/" << P
          << "_triton.py` is the source for PyTorch: `" << P << ".load_triton().kl_launch(dims, {...})` compiles it "
          << "for the local GPU with the measured parameters (num_warps " << m.cand.numWarps << ", num_stages "
          << m.cand.numStages << ").\n";
    }
    return o.str();
}

std::string genTritonModule(const BundleModel& m, const KernelImpl& k)
{
    const std::string& P = m.prefix;
    const Problem& p = *m.problem;
    const LaunchStep& l = k.spec.launches.front();
    std::ostringstream o;
    o << "# " << P << "_triton.py: candidate " << m.candidate->id << " of " << p.name
      << " as Triton source, for PyTorch with the triton package.\n"
      << "# The C library launches the same kernel from Triton " << k.tritonVersion
      << "'s CUBIN with no Python; this module compiles the source with the\n"
      << "# triton installed here instead (any GPU it supports), with the parameters, grid, num_warps and num_stages "
         "the session\n# measured. Usage (torch/ on sys.path):\n#\n#     import "
      << P << "\n#     t = " << P << ".load_triton()\n#     t.kl_launch([";
    for (std::size_t d = 0; d < p.dims.size(); ++d)
        o << (d ? ", " : "") << p.dims[d].name;
    o << "], {";
    bool first = true;
    for (const auto& a : l.args)
        if (!p.dim(a) && !k.params.count(a)) {
            o << (first ? "" : ", ") << "\"" << a << "\": ...";
            first = false;
        }
    o << "})  # outputs written in place\n#\n";
    o << "# The source as the session measured it (parameters named in the first comment):\n\n" << k.source;
    if (!k.source.empty() && k.source.back() != '\n')
        o << "\n";
    o << "\n\nKL_KERNEL = \"" << l.kernel << "\"\nKL_PARAMS = {";
    first = true;
    for (const auto& [n, v] : k.params) {
        o << (first ? "" : ", ") << "\"" << n << "\": " << v;
        first = false;
    }
    o << "}\nKL_NUM_WARPS = " << k.numWarps << "\nKL_NUM_STAGES = " << k.numStages << "\nKL_DIMS = [";
    for (std::size_t d = 0; d < p.dims.size(); ++d)
        o << (d ? ", " : "") << "\"" << p.dims[d].name << "\"";
    o << "]\nKL_ARGS = [";
    for (std::size_t i = 0; i < l.args.size(); ++i)
        o << (i ? ", " : "") << "\"" << l.args[i] << "\"";
    o << "]\nKL_TRITON_VERSION = \"" << k.tritonVersion << "\"\nkl_ops = None  # set by " << P
      << ".load_triton(): the loader of torch.ops." << P << "\n\n\n";
    o << R"(def kl_launch(dims, args, grid=None):
    """Launches the kernel on PyTorch's current stream. dims: in KL_DIMS order; args: the launch's tensors,
    workspaces and scalars by name. grid: the launch grid, else the C library's (torch.ops.)"
      << P << R"(.candidate_grid)."""
    values = dict(KL_PARAMS)
    values.update(zip(KL_DIMS, dims))
    values.update(args)
    missing = [a for a in KL_ARGS if a not in values]
    if missing:
        raise ValueError(")"
      << P << R"(: kl_launch needs " + ", ".join(missing))
    if grid is None:
        grid = kl_ops().candidate_grid(list(dims))
    kernel = globals()[KL_KERNEL]
    constexprs = {n: v for n, v in KL_PARAMS.items() if n in kernel.arg_names}
    runtime = [values[a] for a in KL_ARGS]
    return kernel[tuple(grid)](*runtime, **constexprs, num_warps=KL_NUM_WARPS, num_stages=KL_NUM_STAGES)
)";
    return o.str();
}

} // namespace kl::exporter::detail
