#pragma once
// The one place that includes QCustomPlot: its header relies on foreach and the signals keyword.
#include <qcustomplot.h>
