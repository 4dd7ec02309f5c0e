// The small GPT run the trainer tests share: a 2-layer, 32-wide model on about 120 KB of
// repetitive English (twelve 10 KiB segments, so validation gets one), on the CPU.
#pragma once

#include <fstream>
#include <string>

#include "train/gpt_trainer.h"

namespace kiln::test {

/// Writes the corpus into `dir` and returns its path.
inline std::string gpt_corpus_file(const std::string& dir) {
  std::string path = dir + "/corpus.txt";
  std::ofstream out(path);
  for (int i = 0; i < 1600; ++i)
    out << "The quick brown fox jumps over the lazy dog " << i % 7 << ". A stitch in time saves nine.\n";
  return path;
}

/// 8 steps of batch 4 x 32 tokens, validation every 4 steps, dropout 0.1, a 16-byte sample.
inline train::gpt::TrainConfig tiny_gpt_config(const std::string& dir) {
  train::gpt::TrainConfig c;
  c.gpt.n_layer = 2, c.gpt.n_head = 2, c.gpt.n_embd = 32, c.gpt.block_size = 32, c.gpt.vocab_size = 256;
  c.model = "custom";
  c.data = gpt_corpus_file(dir);
  c.batch_size = 4;
  c.max_steps = 8;
  c.warmup_steps = 2;
  c.lr = 3e-3;
  c.eval_every = 4;
  c.eval_batches = 2;
  c.sample_tokens = 16;
  c.gpt.dropout = 0.1;  // so the resume test also covers the dropout generator
  c.device = kCPU;
  return c;
}

}  // namespace kiln::test
