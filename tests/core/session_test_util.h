#pragma once
#include "core/session_store.h"
#include "tests/support/temp_dir.h"

#include <filesystem>
#include <random>
#include <string>

namespace kl::test {

inline Session sampleHeader(const std::string& id = "s1")
{
    Session s;
    s.id = id;
    s.problemName = "rmsnorm";
    s.device.name = "Test GPU";
    s.device.ccMajor = 9;
    s.settings.agent = "tuner:random";
    return s;
}

inline Candidate sampleCandidate(const std::string& parent, int block)
{
    Candidate c;
    c.parentId = parent;
    c.source = "// @kl:param BLOCK = 256 in [128, 256]\n// @kl:launch k grid=(T) block=(BLOCK) args=(y, x)\n"
               "extern \"C\" __global__ void k(float* y, const float* x) { y[0] = x[0]; }\n";
    c.params = { { "BLOCK", block } };
    c.author = Author::Tuner;
    c.agent = "tuner:random";
    return c;
}

inline Evaluation sampleEvaluation(const std::string& id, double speedup)
{
    Evaluation e;
    e.candidateId = id;
    e.verdict = Verdict::Accepted;
    ShapeResult r;
    r.shape.dims = { { "T", 4096 } };
    r.correct = true;
    TimingStats t;
    t.medianUs = 10;
    t.p10Us = 9;
    t.p90Us = 11;
    t.ciLowUs = 9.9;
    t.ciHighUs = 10.1;
    t.samples = 30;
    r.timing = t;
    r.speedup = speedup;
    e.shapes.push_back(r);
    e.objective = speedup;
    return e;
}

} // namespace kl::test
