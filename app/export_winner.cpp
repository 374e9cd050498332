#include "app/export_winner.h"

#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "core/session_store.h"

#include <QDir>

namespace kl::app {

ExportResult exportCandidate(const kl::Session& session, const kl::CandidateId& id, const QString& directory)
{
    ExportResult result;
    if (!session.tree.contains(id)) {
        result.error = QStringLiteral("no candidate %1 in session %2")
                           .arg(QString::fromStdString(id), QString::fromStdString(session.id));
        return result;
    }
    try {
        QDir().mkpath(directory);
        const kl::Candidate& c = session.tree.at(id);
        const std::filesystem::path dir = directory.toStdString();
        const std::string baked = kl::bakeParameters(c.source, c.params);
        kl::writeFileAtomic(dir / (id + ".cu"), baked);
        kl::writeFileAtomic(dir / (id + ".annotated.cu"), c.source);

        nlohmann::json manifest;
        manifest["format"] = "kernelloop-export-1";
        manifest["session"] = session.id;
        manifest["problem"] = session.problemName;
        manifest["device"] = kl::toJson(session.device);
        manifest["candidate"] = kl::toJson(c, false);
        manifest["sourceSha256"] = kl::sha256Hex(baked);
        manifest["lineage"] = session.tree.lineage(id);
        const auto eval = session.evaluations.find(id);
        if (eval != session.evaluations.end())
            manifest["evaluation"] = kl::toJson(eval->second);
        const auto h = session.hypotheses.find(c.hypothesisId);
        if (h != session.hypotheses.end())
            manifest["hypothesis"] = h->second.text;
        manifest["files"] = { id + ".cu", id + ".annotated.cu" };
        kl::writeFileAtomic(dir / "manifest.json", manifest.dump(2) + "\n");
        result.files << QDir(directory).filePath(QString::fromStdString(id + ".cu"))
                     << QDir(directory).filePath(QString::fromStdString(id + ".annotated.cu"))
                     << QDir(directory).filePath(QStringLiteral("manifest.json"));
    } catch (const std::exception& e) {
        result.error = QString::fromStdString(e.what());
    }
    return result;
}

} // namespace kl::app
