// Umbrella header for kiln::optim: optimizers, learning-rate schedules, gradient clipping.
#pragma once

#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
