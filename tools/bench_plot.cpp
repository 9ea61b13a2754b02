// bench_plot.h: a dependency-free PNG bar chart.
#include "bench_plot.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "qmoe/error.h"

namespace qmoe::cli {
namespace {

uint32_t crc32(const uint8_t* p, size_t n, uint32_t c = 0xffffffffu) {
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c;
}

void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put32(out, uint32_t(data.size()));
  std::vector<uint8_t> td(type, type + 4);
  td.insert(td.end(), data.begin(), data.end());
  out.insert(out.end(), td.begin(), td.end());
  put32(out, crc32(td.data(), td.size()) ^ 0xffffffffu);
}

// 3x5 glyphs for the axis labels, rows top to bottom, 3 bits per row.
const uint8_t kDigits[11][5] = {{7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
                                {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
                                {5, 1, 2, 4, 5}};  // last: '%'

}  // namespace

void write_bar_png(const std::string& path, const std::vector<PlotBar>& bars, int num_series) {
  const int W = std::max(400, int(bars.size()) * 12 + 80), Hh = 420, x0 = 50, y0 = 380, ph = 340;  // 0..125%
  std::vector<uint8_t> img(size_t(W) * Hh * 3, 255);
  auto px = [&](int x, int y, uint32_t rgb) {
    if (x < 0 || y < 0 || x >= W || y >= Hh) return;
    uint8_t* p = &img[(size_t(y) * W + x) * 3];
    p[0] = uint8_t(rgb >> 16), p[1] = uint8_t(rgb >> 8), p[2] = uint8_t(rgb);
  };
  auto text = [&](int x, int y, const std::string& s) {  // 2x-scaled 3x5 glyphs
    for (char ch : s) {
      const int g = ch == '%' ? 10 : ch - '0';
      if (g < 0 || g > 10) { x += 8; continue; }
      for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 3; ++c)
          if (kDigits[g][r] & (4 >> c))
            for (int d = 0; d < 4; ++d) px(x + 2 * c + d % 2, y + 2 * r + d / 2, 0x202020);
      x += 8;
    }
  };
  const double scale = ph / 125.0;
  for (int pct = 0; pct <= 125; pct += 25) {
    const int y = y0 - int(pct * scale);
    for (int x = x0; x < W - 10; ++x) px(x, y, pct == 100 ? 0xc03030 : 0xd0d0d0);
    text(4, y - 5, std::to_string(pct) + "%");
  }
  const uint32_t colors[8] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0x17becf};
  int x = x0 + 6;
  for (size_t i = 0; i < bars.size(); ++i) {
    if (i > 0 && bars[i].group != bars[i - 1].group) {
      for (int y = y0 - ph; y <= y0; ++y) px(x + 2, y, 0x909090);  // shape separator
      x += 6;
    }
    const int h = int(std::min(bars[i].value, 125.0) * scale);
    for (int xx = x; xx < x + 9; ++xx)
      for (int y = y0 - h; y < y0; ++y) px(xx, y, colors[bars[i].series % 8]);
    x += 12;
  }
  for (int s = 0; s < num_series; ++s)  // legend swatches, in scheme order (named on stdout)
    for (int xx = 0; xx < 14; ++xx)
      for (int y = 0; y < 14; ++y) px(x0 + s * 24 + xx, Hh - 22 + y, colors[s % 8]);

  std::vector<uint8_t> raw;
  for (int y = 0; y < Hh; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), img.begin() + size_t(y) * W * 3, img.begin() + size_t(y + 1) * W * 3);
  }
  std::vector<uint8_t> z = {0x78, 0x01};  // zlib header, then "stored" deflate blocks of <= 65535 bytes
  uint32_t a = 1, b = 0;
  for (uint8_t c : raw) a = (a + c) % 65521, b = (b + a) % 65521;
  for (size_t off = 0; off < raw.size(); off += 65535) {
    const size_t n = std::min<size_t>(65535, raw.size() - off);
    z.push_back(off + n == raw.size() ? 1 : 0);
    z.push_back(uint8_t(n)), z.push_back(uint8_t(n >> 8));
    z.push_back(uint8_t(~n)), z.push_back(uint8_t(~n >> 8));
    z.insert(z.end(), raw.begin() + off, raw.begin() + off + n);
  }
  put32(z, (b << 16) | a);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put32(ihdr, uint32_t(W)), put32(ihdr, uint32_t(Hh));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(png.data(), 1, png.size(), f) != png.size()) {
    if (f) std::fclose(f);
    bad_input("bench: cannot write plot ", path);
  }
  std::fclose(f);
}

}  // namespace qmoe::cli
