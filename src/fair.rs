//! The fair path's policy: pure logic, no BPF.
//!
//! Each runnable task gets a virtual runtime that advances by the CPU time
//! it used, scaled by 100 / weight (sched_ext weights: 100 is nice 0, nice 5
//! is about 33). Tasks are ordered by a virtual deadline: vruntime plus the
//! slice they are about to get, scaled the same way. A task that slept can
//! come back at most one slice behind the current virtual time, so sleeping
//! earns a bounded head start, never a monopoly.

use std::collections::HashMap;

/// Dispatch to any CPU the task may run on.
pub const CPU_ANY: i32 = -1;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairParams {
    pub slice_max_ns: u64,
    pub slice_min_ns: u64,
    pub target_latency_ns: u64,
}

/// What the policy needs to know about a runnable task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Runnable {
    pub pid: i32,
    pub cpu: i32,
    pub nr_cpus_allowed: u32,
    pub weight: u64,
    pub sum_exec_runtime: u64,
    /// Part of `sum_exec_runtime` spent in the express lane: the token
    /// bucket pays for it, so the fair path does not charge it again.
    pub express_exec_ns: u64,
    pub wakeup: bool,
}

/// The policy's decision for one task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub cpu: i32,
    pub slice_ns: u64,
    pub vtime: u64,
}

#[derive(Debug, Clone, Copy)]
struct TaskState {
    vruntime: u64,
    last_sum_exec: u64,
    last_express_exec: u64,
    last_seen_ns: u64,
}

pub struct FairPolicy {
    params: FairParams,
    tasks: HashMap<i32, TaskState>,
    /// CPU time charged to tasks' vruntime, in total (ns).
    charged_ns: u64,
    /// Of that, the CPU time the debt ceiling forgave (ns): time a task
    /// used away from the fair path's order. Tasks that stay runnable on
    /// the fair path should see next to none.
    forgiven_ns: u64,
}

/// Scales CPU time to virtual time for a weight (100 = nice 0).
pub fn scale_by_weight(ns: u64, weight: u64) -> u64 {
    ns.saturating_mul(100) / weight.max(1)
}

impl FairPolicy {
    pub fn new(params: FairParams) -> Self {
        Self {
            params,
            tasks: HashMap::new(),
            charged_ns: 0,
            forgiven_ns: 0,
        }
    }

    pub fn set_params(&mut self, params: FairParams) {
        self.params = params;
    }

    /// Slice for the next run, shrinking as more tasks wait.
    pub fn slice_for(&self, nr_waiting: u64) -> u64 {
        let p = &self.params;
        (p.target_latency_ns / nr_waiting.max(1)).clamp(p.slice_min_ns, p.slice_max_ns)
    }

    /// Decides CPU, slice and deadline for a runnable task.
    ///
    /// `vtime_now` is the fair path's virtual time (fair.bpf.c: the front
    /// of the runnable tasks' deadlines);
    /// `nr_waiting` estimates how many tasks compete; `now_ns` is only used
    /// to forget tasks that have gone away.
    pub fn decide(
        &mut self,
        t: &Runnable,
        vtime_now: u64,
        nr_waiting: u64,
        now_ns: u64,
    ) -> Decision {
        let slice_ns = self.slice_for(nr_waiting);
        let lag_floor = vtime_now.saturating_sub(self.params.slice_max_ns);
        let debt_ceiling = vtime_now.saturating_add(self.params.target_latency_ns);
        let st = self.tasks.entry(t.pid).or_insert(TaskState {
            vruntime: vtime_now,
            last_sum_exec: t.sum_exec_runtime,
            last_express_exec: t.express_exec_ns,
            last_seen_ns: now_ns,
        });

        // A smaller total means the pid was reused by a new thread.
        if t.sum_exec_runtime < st.last_sum_exec {
            st.vruntime = vtime_now;
        } else {
            let express = t.express_exec_ns.saturating_sub(st.last_express_exec);
            let used = (t.sum_exec_runtime - st.last_sum_exec).saturating_sub(express);
            st.vruntime = st.vruntime.saturating_add(scale_by_weight(used, t.weight));
            self.charged_ns = self.charged_ns.wrapping_add(used);
        }
        st.last_sum_exec = t.sum_exec_runtime;
        st.last_express_exec = t.express_exec_ns;
        st.last_seen_ns = now_ns;

        // CPU time used away from the fair path (on an idle CPU, before the
        // scheduler saw the task) is charged at most one target latency
        // ahead of everyone: a task coming back to the fair path waits its
        // turn, not for as long as it once ran.
        if st.vruntime > debt_ceiling {
            let forgiven = (st.vruntime - debt_ceiling).saturating_mul(t.weight.max(1)) / 100;
            self.forgiven_ns = self.forgiven_ns.wrapping_add(forgiven);
            st.vruntime = debt_ceiling;
        }

        // Only a task that slept gets clamped: one that stayed runnable
        // keeps its exact position, or weights would not hold.
        if t.wakeup && st.vruntime < lag_floor {
            st.vruntime = lag_floor;
        }

        Decision {
            cpu: if t.nr_cpus_allowed == 1 {
                t.cpu
            } else {
                CPU_ANY
            },
            slice_ns,
            vtime: st
                .vruntime
                .saturating_add(scale_by_weight(slice_ns, t.weight)),
        }
    }

    /// Forgets tasks not seen for `idle_ns`; returns how many were dropped.
    pub fn prune(&mut self, now_ns: u64, idle_ns: u64) -> usize {
        let before = self.tasks.len();
        self.tasks
            .retain(|_, st| now_ns.saturating_sub(st.last_seen_ns) < idle_ns);
        before - self.tasks.len()
    }

    /// CPU time charged so far and, of it, what the debt ceiling forgave (ns).
    pub fn charged_and_forgiven_ns(&self) -> (u64, u64) {
        (self.charged_ns, self.forgiven_ns)
    }

    pub fn nr_tasks(&self) -> usize {
        self.tasks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn params() -> FairParams {
        FairParams {
            slice_max_ns: 5 * MS,
            slice_min_ns: MS / 2,
            target_latency_ns: 20 * MS,
        }
    }

    fn task(pid: i32, weight: u64, sum_exec: u64) -> Runnable {
        Runnable {
            pid,
            cpu: 1,
            nr_cpus_allowed: 4,
            weight,
            sum_exec_runtime: sum_exec,
            express_exec_ns: 0,
            wakeup: false,
        }
    }

    /// Simulates one CPU running whichever task has the earliest deadline.
    fn simulate(weights: &[u64], rounds: usize) -> Vec<u64> {
        let mut pol = FairPolicy::new(params());
        let mut used = vec![0u64; weights.len()];
        let mut vtime_now = 0;
        let mut deadlines: Vec<Decision> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| pol.decide(&task(i as i32, w, 0), 0, weights.len() as u64, 0))
            .collect();
        for _ in 0..rounds {
            let (i, d) = deadlines
                .iter()
                .enumerate()
                .min_by_key(|(_, d)| d.vtime)
                .map(|(i, d)| (i, *d))
                .unwrap();
            vtime_now = vtime_now.max(d.vtime);
            used[i] += d.slice_ns;
            deadlines[i] = pol.decide(&task(i as i32, weights[i], used[i]), vtime_now, 2, 0);
        }
        used
    }

    #[test]
    fn nice_0_vs_nice_5_split_about_3_to_1() {
        // Kernel weights: nice 0 = 1024, nice 5 = 335; sched_ext scales to 100 and 32.
        let used = simulate(&[100, 32], 4000);
        let ratio = used[0] as f64 / used[1] as f64;
        assert!((2.8..3.4).contains(&ratio), "ratio {ratio}");
    }

    #[test]
    fn equal_weights_share_equally() {
        let used = simulate(&[100, 100, 100], 3000);
        let max = *used.iter().max().unwrap() as f64;
        let min = *used.iter().min().unwrap() as f64;
        assert!(max / min < 1.01, "{used:?}");
    }

    #[test]
    fn sleeper_credit_is_bounded_to_one_slice() {
        let mut pol = FairPolicy::new(params());
        pol.decide(&task(1, 100, 0), 0, 1, 0);
        let mut t = task(1, 100, 0);
        t.wakeup = true;
        // It slept while virtual time moved a full second ahead.
        let d = pol.decide(&t, 1000 * MS, 1, 0);
        let slice = d.slice_ns;
        assert_eq!(d.vtime, 1000 * MS - params().slice_max_ns + slice);
    }

    #[test]
    fn runnable_task_is_not_clamped() {
        let mut pol = FairPolicy::new(params());
        pol.decide(&task(1, 100, 0), 0, 1, 0);
        let d = pol.decide(&task(1, 100, MS), 1000 * MS, 1, 0);
        assert_eq!(d.vtime, MS + d.slice_ns);
    }

    #[test]
    fn express_time_is_not_charged_again() {
        let mut pol = FairPolicy::new(params());
        pol.decide(&task(1, 100, 0), 0, 1, 0);
        // 2 ms of CPU, all of it in the express lane: no fair charge.
        let mut t = task(1, 100, 2 * MS);
        t.express_exec_ns = 2 * MS;
        let d = pol.decide(&t, 0, 1, 0);
        assert_eq!(d.vtime, d.slice_ns);
        // Then 3 ms more, 1 of them express: 2 ms charged.
        let mut t = task(1, 100, 5 * MS);
        t.express_exec_ns = 3 * MS;
        let d = pol.decide(&t, 0, 1, 0);
        assert_eq!(d.vtime, 2 * MS + d.slice_ns);
    }

    #[test]
    fn debt_from_outside_the_fair_path_is_capped() {
        let mut pol = FairPolicy::new(params());
        pol.decide(&task(1, 100, 0), 0, 1, 0);
        // It ran 1.5 s on an idle CPU, unseen by the policy.
        let d = pol.decide(&task(1, 100, 1500 * MS), 10 * MS, 1, 0);
        assert_eq!(d.vtime, 10 * MS + params().target_latency_ns + d.slice_ns);
        // Charged 1.5 s; forgiven all of it above vtime_now + target latency.
        let ceiling = 10 * MS + params().target_latency_ns;
        assert_eq!(
            pol.charged_and_forgiven_ns(),
            (1500 * MS, 1500 * MS - ceiling)
        );
    }

    #[test]
    fn forgiven_time_is_counted_in_cpu_time() {
        let mut pol = FairPolicy::new(params());
        pol.decide(&task(1, 50, 0), 0, 1, 0);
        // Weight 50: 100 ms of CPU is 200 ms of vruntime, 200 - 20 over.
        pol.decide(&task(1, 50, 100 * MS), 0, 1, 0);
        assert_eq!(pol.charged_and_forgiven_ns(), (100 * MS, 90 * MS));
    }

    #[test]
    fn runnable_tasks_following_vtime_now_are_not_forgiven() {
        let mut pol = FairPolicy::new(params());
        let mut used = [0u64; 2];
        let mut vtime_now = 0;
        pol.decide(&task(0, 100, 0), 0, 2, 0);
        pol.decide(&task(1, 100, 0), 0, 2, 0);
        for round in 0..50 {
            let i = round % 2;
            used[i] += 5 * MS;
            let d = pol.decide(&task(i as i32, 100, used[i]), vtime_now, 2, 0);
            vtime_now = vtime_now.max(d.vtime - d.slice_ns);
        }
        assert_eq!(pol.charged_and_forgiven_ns(), (250 * MS, 0));
    }

    #[test]
    fn heavier_task_gets_earlier_deadline_for_same_usage() {
        let mut pol = FairPolicy::new(params());
        let light = pol.decide(&task(1, 50, 0), 0, 1, 0);
        let heavy = pol.decide(&task(2, 200, 0), 0, 1, 0);
        assert!(heavy.vtime < light.vtime);
    }

    #[test]
    fn slice_shrinks_with_load_and_is_clamped() {
        let pol = FairPolicy::new(params());
        assert_eq!(pol.slice_for(1), 5 * MS);
        assert_eq!(pol.slice_for(10), 2 * MS);
        assert_eq!(pol.slice_for(1000), MS / 2);
        assert_eq!(pol.slice_for(0), 5 * MS);
    }

    #[test]
    fn pinned_tasks_keep_their_cpu() {
        let mut pol = FairPolicy::new(params());
        let mut t = task(1, 100, 0);
        t.nr_cpus_allowed = 1;
        t.cpu = 3;
        assert_eq!(pol.decide(&t, 0, 1, 0).cpu, 3);
        assert_eq!(pol.decide(&task(2, 100, 0), 0, 1, 0).cpu, CPU_ANY);
    }

    #[test]
    fn reused_pid_starts_fresh() {
        let mut pol = FairPolicy::new(params());
        pol.decide(&task(1, 100, 0), 0, 1, 0);
        pol.decide(&task(1, 100, 500 * MS), 0, 1, 0);
        let d = pol.decide(&task(1, 100, 1), 10 * MS, 1, 0);
        assert_eq!(d.vtime, 10 * MS + d.slice_ns);
    }

    #[test]
    fn prune_forgets_idle_tasks() {
        let mut pol = FairPolicy::new(params());
        pol.decide(&task(1, 100, 0), 0, 1, 0);
        pol.decide(&task(2, 100, 0), 0, 1, 50 * MS);
        assert_eq!(pol.prune(60 * MS, 30 * MS), 1);
        assert_eq!(pol.nr_tasks(), 1);
    }
}
