#pragma once
// Export of one candidate: its source with the parameters baked in, the annotated original, and a
// manifest saying where it came from and how it measured. The full bundle (dispatcher, fallback)
// comes from kl_export; this is what the workbench writes on its own.
#include "core/session.h"

#include <QString>
#include <QStringList>

namespace kl::app {

struct ExportResult {
    QStringList files;
    QString error; // empty on success
};

ExportResult exportCandidate(const kl::Session& session, const kl::CandidateId& id, const QString& directory);

} // namespace kl::app
