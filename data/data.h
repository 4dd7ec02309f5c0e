// Umbrella header of kiln::data: datasets, the IDX/MNIST readers, samplers and the DataLoader.
#pragma once

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/mnist.h"
#include "data/sampler.h"
