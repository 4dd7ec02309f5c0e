// Umbrella header for models: tensors and autograd, layers, losses, init (training checkpoints: train/checkpoint.h).
#pragma once

#include "autograd/autograd.h"
#include "nn/activation.h"
#include "nn/activation_checkpoint.h"
#include "nn/attention.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/module_list.h"
#include "nn/multihead_attention.h"
#include "nn/norm.h"
#include "nn/sequential.h"
