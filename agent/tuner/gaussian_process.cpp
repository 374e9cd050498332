#include "agent/tuner/gaussian_process.h"

#include <cmath>
#include <limits>

namespace kl::tuner {

double GaussianProcess::kernel(const std::vector<double>& a, const std::vector<double>& b, double length) const
{
    double d2 = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = a[i] - b[i];
        d2 += d * d;
    }
    return std::exp(-0.5 * d2 / (length * length));
}

bool GaussianProcess::factor(double length, double& logLikelihood)
{
    const std::size_t n = m_X.size();
    std::vector<double> L(n * n, 0.0);
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j <= i; ++j) {
            double sum = kernel(m_X[i], m_X[j], length) + (i == j ? m_noise : 0.0);
            for (std::size_t k = 0; k < j; ++k)
                sum -= L[i * n + k] * L[j * n + k];
            if (i == j) {
                if (sum <= 0)
                    return false;
                L[i * n + i] = std::sqrt(sum);
            } else {
                L[i * n + j] = sum / L[j * n + j];
            }
        }
    // alpha = L^T \ (L \ y)
    std::vector<double> z(n);
    for (std::size_t i = 0; i < n; ++i) {
        double s = m_y[i];
        for (std::size_t k = 0; k < i; ++k)
            s -= L[i * n + k] * z[k];
        z[i] = s / L[i * n + i];
    }
    std::vector<double> alpha(n);
    for (std::size_t ii = n; ii-- > 0;) {
        double s = z[ii];
        for (std::size_t k = ii + 1; k < n; ++k)
            s -= L[k * n + ii] * alpha[k];
        alpha[ii] = s / L[ii * n + ii];
    }
    double logDet = 0;
    double fit = 0;
    for (std::size_t i = 0; i < n; ++i) {
        logDet += std::log(L[i * n + i]);
        fit += m_y[i] * alpha[i];
    }
    logLikelihood = -0.5 * fit - logDet;
    m_L = std::move(L);
    m_alpha = std::move(alpha);
    return true;
}

void GaussianProcess::fit(const std::vector<std::vector<double>>& X, const std::vector<double>& y)
{
    m_X = X;
    const std::size_t n = y.size();
    m_mean = 0;
    for (double v : y)
        m_mean += v;
    m_mean /= static_cast<double>(std::max<std::size_t>(n, 1));
    double var = 0;
    for (double v : y)
        var += (v - m_mean) * (v - m_mean);
    m_scale = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 1.0;
    if (!(m_scale > 1e-12))
        m_scale = 1.0;
    m_y.resize(n);
    for (std::size_t i = 0; i < n; ++i)
        m_y[i] = (y[i] - m_mean) / m_scale;

    double bestLl = -std::numeric_limits<double>::infinity();
    double bestLength = 0.3;
    for (double length : { 0.08, 0.15, 0.25, 0.4, 0.7, 1.2 }) {
        double ll;
        if (factor(length, ll) && ll > bestLl) {
            bestLl = ll;
            bestLength = length;
        }
    }
    m_length = bestLength;
    double ll;
    if (!factor(m_length, ll)) {
        m_noise = 1e-1; // a degenerate design (repeated points); a larger nugget always factors
        factor(m_length, ll);
    }
}

void GaussianProcess::predict(const std::vector<double>& x, double& mean, double& stddev) const
{
    const std::size_t n = m_X.size();
    if (n == 0) {
        mean = 0;
        stddev = 1;
        return;
    }
    std::vector<double> k(n);
    for (std::size_t i = 0; i < n; ++i)
        k[i] = kernel(x, m_X[i], m_length);
    double mu = 0;
    for (std::size_t i = 0; i < n; ++i)
        mu += k[i] * m_alpha[i];
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        double s = k[i];
        for (std::size_t j = 0; j < i; ++j)
            s -= m_L[i * n + j] * v[j];
        v[i] = s / m_L[i * n + i];
    }
    double var = 1.0;
    for (double vi : v)
        var -= vi * vi;
    mean = mu * m_scale + m_mean;
    stddev = std::sqrt(std::max(var, 1e-12)) * m_scale;
}

} // namespace kl::tuner
