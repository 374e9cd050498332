#pragma once
// A small Gaussian-process regressor (RBF kernel, noise term) for the model-based strategy. Exact
// inference by Cholesky; the length scale is picked from a grid by marginal likelihood on each fit.
#include <vector>

namespace kl::tuner {

class GaussianProcess {
public:
    // X: n points of dimension d; y: n targets (standardized inside).
    void fit(const std::vector<std::vector<double>>& X, const std::vector<double>& y);
    // Posterior mean and standard deviation in the units of y.
    void predict(const std::vector<double>& x, double& mean, double& stddev) const;
    double lengthScale() const { return m_length; }
    bool fitted() const { return !m_X.empty(); }

private:
    bool factor(double length, double& logLikelihood);
    double kernel(const std::vector<double>& a, const std::vector<double>& b, double length) const;

    std::vector<std::vector<double>> m_X;
    std::vector<double> m_y; // standardized
    double m_mean = 0;
    double m_scale = 1;
    double m_length = 0.3;
    double m_noise = 1e-3;
    std::vector<double> m_L; // lower Cholesky factor, row-major n x n
    std::vector<double> m_alpha; // K^-1 y
};

} // namespace kl::tuner
