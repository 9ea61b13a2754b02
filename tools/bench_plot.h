// PNG bar chart of `qmoe bench` rows: % of the hardware floor per row (table order), bars colored
// by scheme, rows of one shape grouped, grid lines every 25% with their values. Written without
// any library: RGB pixels, zlib "stored" blocks, CRC-32 and Adler-32 by hand.
#pragma once
#include <string>
#include <vector>

namespace qmoe::cli {

struct PlotBar {
  std::string group;   // shape
  int series = 0;      // scheme index (color)
  double value = 0;    // % of floor
};

// Writes `path`; throws qmoe::Error when the file cannot be written.
void write_bar_png(const std::string& path, const std::vector<PlotBar>& bars, int num_series);

}  // namespace qmoe::cli
