/* SPDX-License-Identifier: GPL-2.0 */
/*
 * libexpress_mark.so: opt-in markers for scx_express.
 *
 * scx_express attaches uprobes to these functions; calling one classifies
 * the *calling thread* (not the process):
 *   express_mark_agent()  - this thread runs an agent control loop
 *   express_mark_gpu()    - this thread launches GPU work
 *   express_unmark()      - drop this thread's class again
 * Without the scheduler running they do nothing (and cost a few ns).
 */
#ifndef EXPRESS_MARK_H
#define EXPRESS_MARK_H

#ifdef __cplusplus
extern "C" {
#endif

void express_mark_agent(void);
void express_mark_gpu(void);
void express_unmark(void);

#ifdef __cplusplus
}
#endif

#endif
