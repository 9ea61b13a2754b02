// `qmoe gen --arch A --format F --out DIR`: writes a tiny complete model directory in one of the
// checkpoint layouts qmoe loads (src/models/gen.h), plus the bf16 original (DIR/bf16 by default).
#include <cstdio>

#include "commands.h"
#include "models/gen.h"
#include "qmoe/error.h"

namespace qmoe::cli {
namespace {

Registrar reg("gen", "write a small random checkpoint in a given architecture and format (+ its bf16 original)",
              [](CLI::App& app) -> std::function<int()> {
                auto o = std::make_shared<models::GenOptions>();
                auto list = std::make_shared<bool>(false);
                app.add_flag("--list-formats", *list, "print the format names and the archs each applies to");
                app.add_option("--arch", o->arch, "llama4 | mixtral | qwen3_moe | deepseek_v3 | gpt_oss");
                app.add_option("--format", o->format, "checkpoint format (see --list-formats)")->capture_default_str();
                app.add_option("--out", o->out, "model directory to write");
                app.add_option("--reference-out", o->reference_out,
                               "where to write the bf16 original (default DIR/bf16; '-' = none)");
                app.add_option("--layers", o->layers, "MoE layers")->capture_default_str();
                app.add_option("--experts", o->experts, "routed experts E")->capture_default_str();
                app.add_option("--hidden", o->hidden, "hidden size H")->capture_default_str();
                app.add_option("--intermediate", o->intermediate, "expert intermediate size I")->capture_default_str();
                app.add_option("--top-k", o->top_k, "experts per token (0 = the arch's usual)")->capture_default_str();
                app.add_option("--seed", o->seed, "random seed")->capture_default_str();
                app.add_option("--shards", o->shards, "safetensors shards (> 1 writes model.safetensors.index.json)")
                    ->capture_default_str();
                return [o, list]() {
                  if (*list) {
                    for (const auto& f : models::gen_formats()) {
                      std::string archs;
                      for (const auto& a : f.archs) archs += (archs.empty() ? "" : ",") + a;
                      std::printf("%-22s %-44s %s\n", f.name.c_str(), archs.c_str(), f.description.c_str());
                    }
                    return 0;
                  }
                  if (o->arch.empty() || o->out.empty()) bad_input("gen: --arch and --out are required (or --list-formats)");
                  models::generate_checkpoint(*o);
                  std::printf("wrote %s (%s, %s)%s\n", o->out.c_str(), o->arch.c_str(), o->format.c_str(),
                              o->format == "bf16" || o->reference_out == "-"
                                  ? ""
                                  : (" + bf16 original in " + (o->reference_out.empty() ? o->out + "/bf16" : o->reference_out)).c_str());
                  return 0;
                };
              });

}  // namespace
}  // namespace qmoe::cli
