// Umbrella header for kiln::amp, mixed precision: autocast, loss scaling, master weights.
//
// "O1" (the default): the model stays f32; the forward pass runs under amp::AutocastGuard, which
// sends matmul/linear/conv through f16 or bf16 and keeps softmax, norms, reductions,
// exp/log/pow and losses in f32 (autocast_policy(): the `amp` column of core/elementwise_ops.h
// and the table in core/autocast_policy.h). Gradients reach the f32
// weights in f32. With f16, add a GradScaler; bf16 has f32's exponent range and needs none.
//
//   amp::GradScaler scaler;                           // f16
//   for (auto& [x, y] : batches) {
//     Tensor loss;
//     { amp::AutocastGuard autocast(kFloat16); loss = cross_entropy(model->forward(x), y); }
//     opt.zero_grad();
//     scaler.scale(loss).backward();
//     scaler.step(opt);
//     scaler.update();
//   }
//
// "O2": the model itself in f16/bf16 (module.to(kBFloat16)): half the weight memory, no
// per-step weight casts. The optimizer keeps f32 master copies of the weights
// (opt.set_master_weights(), optim/optimizer.h) and steps on them, so updates smaller than a
// 16-bit weight's precision are not rounded away; its state is f32, and checkpoints hold the
// master copies. Keep the autocast guard around the forward pass so the f32-class ops still run
// in f32 (and f32 inputs are cast down to the model's dtype).
//
// Checkpoints: GradScaler::save_to / load_from put the scaler's state (scale, growth tracker,
// skipped steps) into train::TrainingState::extra.
#pragma once

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/autocast_policy.h"
