/*
 * read_once.h: reading a model once across the ranks of an NCCL communicator
 * (wm_load_options.nccl_comm; read_once.c). Part of the CUDA backend; built where nccl.h is
 * found. The plan (plan.c) gives each rank its byte range of every tensor that is not split;
 * the CUDA pipeline fills those ranges; these functions check the communicator before and
 * complete the tensors after.
 */
#ifndef WM_READ_ONCE_H
#define WM_READ_ONCE_H

#include "backend.h"

/* Loads NCCL (once per process) and checks that the communicator's size and rank are the
 * load's tp_world and tp_rank and its device the load's. WM_EUNSUPPORTED where NCCL cannot be
 * loaded, WM_EINVAL on a mismatch, WM_EDEVICE when NCCL fails. Loading thread. */
wm_status wm__read_once_check(const wm_model *m, wm_error *err);

/* Completes every read-once tensor on this rank's device (dev: the chunks' buffers): one
 * ncclBroadcast per rank of that rank's range, fused in groups, on a stream of its own, then
 * waits for them. Every rank must call it with the same plan. Loading thread, the model's
 * device current. */
wm_status wm__read_once_complete(const wm_model *m, unsigned char *const *dev, wm_error *err);

#endif /* WM_READ_ONCE_H */
