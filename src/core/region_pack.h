// The word layout of a packed persistent-region schedule: the constants both sides of the upload
// need, the host that writes it (graph/region_schedule.h, pack_region_schedule) and the device loop
// that reads it (kernels/persistent_region.cuh), which may not include graph/. Pure constants, no
// logic; usable from host and device code.
//
// One int32 buffer: a header of REGION_PACK_HEADER_WORDS words, then the arrays, each at the
// offset (in words, from the start of the buffer) its header word holds, so a kernel needs no
// arithmetic to find them. Header words:
//   0 REGION_PACK_MAGIC, 1 REGION_PACK_VERSION, 2 first_op, 3 last_op, 4 num_ctas, 5 num_tasks,
//   6 num_waits, 7 num_signals, 8 num_semaphores, then the offsets of
//   9 cta_begin [num_ctas + 1], 10 cta_task [num_tasks], 11 task_op [num_tasks],
//   12 task_tile [num_tasks], 13 wait_begin [num_tasks + 1], 14 wait_sem [num_waits],
//   15 wait_target [num_waits], 16 signal_begin [num_tasks + 1], 17 signal_sem [num_signals],
//   18 sem_op [num_semaphores], 19 sem_row_block [num_semaphores], 20 sem_tile [num_semaphores],
//   21 the total length in words.
#pragma once

#include <cstdint>

namespace megaops {

constexpr int32_t REGION_PACK_MAGIC = 0x52534348;  // "RSCH"
constexpr int32_t REGION_PACK_VERSION = 1;
constexpr int REGION_PACK_HEADER_WORDS = 22;

enum RegionPackWord : int {
  RP_MAGIC = 0,
  RP_VERSION,
  RP_FIRST_OP,
  RP_LAST_OP,
  RP_NUM_CTAS,
  RP_NUM_TASKS,
  RP_NUM_WAITS,
  RP_NUM_SIGNALS,
  RP_NUM_SEMAPHORES,
  RP_CTA_BEGIN,
  RP_CTA_TASK,
  RP_TASK_OP,
  RP_TASK_TILE,
  RP_WAIT_BEGIN,
  RP_WAIT_SEM,
  RP_WAIT_TARGET,
  RP_SIGNAL_BEGIN,
  RP_SIGNAL_SEM,
  RP_SEM_OP,
  RP_SEM_ROW_BLOCK,
  RP_SEM_TILE,
  RP_TOTAL_WORDS,
};
static_assert(RP_TOTAL_WORDS + 1 == REGION_PACK_HEADER_WORDS);

}  // namespace megaops
