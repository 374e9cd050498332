// make_export_session PROBLEM SESSION_DIR: a session whose candidate is PROBLEM's tunable template with
// synthetic per-shape results (labelled as such in its id), for exercising the export path on a GPU box
// where no real session is available. gpu-bench.sh prefers $KL_GPU_SESSION or a real `kloop run`.
#include "tests/export/export_fixture.h"

#include <iostream>

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::cerr << "usage: make_export_session PROBLEM SESSION_DIR\n";
        return 2;
    }
    try {
        const std::filesystem::path folder = std::filesystem::path(KL_SOURCE_DIR) / "kernels/problems" / argv[1];
        const kl::Problem p = kl::loadProblem(folder.string());
        const auto b = kl::test::buildSessionFrom(folder, folder / p.templateFile, kl::test::syntheticOutcomes(p),
            kl::Verdict::Accepted, {}, "synthetic measurements for the export bench", "", argv[2]);
        std::cout << b.dir.string() << " " << b.candidateId << "\n";
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "make_export_session: " << e.what() << "\n";
        return 1;
    }
}
