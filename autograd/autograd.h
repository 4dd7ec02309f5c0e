// Umbrella header: the core tensor API plus backward, hooks and gradcheck.
#pragma once

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "core/grad_mode.h"
#include "core/ops.h"
