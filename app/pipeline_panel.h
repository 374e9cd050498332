#pragma once
// The pipeline view (issue #19): a pipeline result (the worker's pipeline reply, `kloop pipeline run --json`) as a
// strip of its stages, each as wide as its share of the time, coloured by what runs there (a candidate, the
// baseline) and marked where it breaks capture or is wrong; the end-to-end speedup over the all-baseline pipeline
// with its interval, MFU/MBU, the graph-vs-eager check, each output's end-to-end budget (the tolerance derived from the
// honest error, and what the pipeline measured) and the verdict; the stages' table below.
#include "core/pipeline_result.h"

#include <QString>
#include <QWidget>

class QComboBox;
class QLabel;
class QTableView;

namespace kl::app {

class PipelineStageModel;

class StageStrip : public QWidget {
    Q_OBJECT
public:
    explicit StageStrip(PipelineStageModel* model, QWidget* parent = nullptr);
    QRectF stageRect(int row) const; // where row's stage is drawn
    QSize sizeHint() const override;

protected:
    void paintEvent(QPaintEvent*) override;

private:
    PipelineStageModel* m_model;
};

class PipelinePanel : public QWidget {
    Q_OBJECT
public:
    explicit PipelinePanel(QWidget* parent = nullptr);

    bool loadFile(const QString& path); // false: the error is shown and the previous result kept
    void setResult(kl::PipelineResult result);
    void selectShape(int index);
    const kl::PipelineResult& result() const { return m_result; }

    PipelineStageModel* model() const { return m_model; }
    StageStrip* strip() const { return m_strip; }
    QComboBox* shapes() const { return m_shapes; }
    QTableView* view() const { return m_view; }
    QString summary() const; // speedup with its interval, MFU/MBU
    QString graphCheck() const; // graph vs eager
    QString budgets() const; // each pipeline output's end-to-end tolerance, honest error and measured error
    QString verdict() const;
    QString error() const;

private:
    kl::PipelineResult m_result;
    PipelineStageModel* m_model;
    StageStrip* m_strip;
    QComboBox* m_shapes;
    QLabel* m_title;
    QLabel* m_summary;
    QLabel* m_graphCheck;
    QLabel* m_budgets;
    QLabel* m_verdict;
    QLabel* m_error;
    QTableView* m_view;
};

} // namespace kl::app
