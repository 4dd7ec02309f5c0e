// Kiln's distributed training in one include: stores and rendezvous, process groups and
// init_process_group, data parallel (DDP, ZeRO), pipeline parallel, the flight recorder, and a
// rank's side of the launcher. Each part also has its own header and Bazel package
// (distributed/<part>/, docs/DESIGN.md); //distributed links them all except the NCCL backend.
#pragma once

#include "distributed/store/errors.h"
#include "distributed/store/file_store.h"
#include "distributed/store/rendezvous.h"
#include "distributed/store/store.h"
#include "distributed/store/tcp_store.h"

#include "distributed/backend/init.h"
#include "distributed/backend/job_env.h"
#include "distributed/backend/process_group.h"

#include "distributed/launch/exit_codes.h"
#include "distributed/launch/heartbeat.h"
#include "distributed/launch/local_ranks.h"
#include "distributed/launch/preemption.h"

#include "distributed/data_parallel/clip_grad_norm.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "distributed/data_parallel/zero.h"

#include "distributed/pipeline/pipeline.h"
#include "distributed/pipeline/pipeline_balance.h"
#include "distributed/pipeline/pipeline_schedule.h"

#include "distributed/debug/flight_recorder.h"
#include "distributed/debug/traced_process_group.h"
