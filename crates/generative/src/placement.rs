//! Keeping a parallel pass's helper threads off the CPU its caller runs on.
//!
//! Why: a pass starts on the calling thread and wakes pool threads to help
//! ([`run_indexed_with`](crate::parallel::run_indexed_with)). On our 2-vCPU benchmark host the
//! woken thread was often placed on the caller's CPU, which was busy with the pass, while the
//! other CPU idled: likely because, on a virtual machine, Linux counts an idle vCPU the host has
//! descheduled as busy (`vcpu_is_preempted`; not verified). The two then took turns on one CPU
//! until the load balancer moved one of them, 2–4 ms later. That happened in about 4 of 10
//! passes at d = 2, each slower than one thread alone: an LDA fit at n = 1e6, d = 2 took 4–7 ms
//! against 2–3 ms (see BENCHMARKS.md, twenty-sixth round).
//!
//! A helper that finds itself on the caller's CPU therefore removes that CPU from the set it
//! may run on, which moves it at once to another CPU of its set, and puts the set back when its
//! share is done. Where the set has no other CPU (a process pinned to one CPU), or off Linux,
//! nothing changes. Placement never changes what is computed: results depend on the item
//! indices alone.

/// The CPU the calling thread is running on, if the system says.
pub(crate) fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `sched_getcpu` takes no arguments and only reads the thread's state.
        #[allow(unsafe_code)]
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// While alive, the calling thread may not run on the CPU it was moved off (see
/// [`move_off`]); dropping it restores the set of CPUs the thread had before.
pub(crate) struct MovedOff {
    #[cfg(target_os = "linux")]
    saved: Option<libc::cpu_set_t>,
}

/// Moves the calling thread off `cpu` if it is running there and its set of allowed CPUs has
/// another; the returned guard restores the set when dropped.
pub(crate) fn move_off(cpu: Option<usize>) -> MovedOff {
    #[cfg(target_os = "linux")]
    {
        let saved = match cpu {
            Some(cpu) if current_cpu() == Some(cpu) => linux::exclude(cpu),
            _ => None,
        };
        MovedOff { saved }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        MovedOff {}
    }
}

impl Drop for MovedOff {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(set) = self.saved.take() {
            linux::set_allowed(&set);
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    // The affinity calls with pid 0 act on the calling thread only.
    #![allow(unsafe_code)]

    use libc::{CPU_CLR, CPU_COUNT, CPU_ISSET, CPU_SETSIZE, cpu_set_t};

    /// The calling thread's allowed CPUs, if the system says.
    pub(super) fn allowed() -> Option<cpu_set_t> {
        // SAFETY: an all-zero `cpu_set_t` is a valid (empty) set, and the call writes at most
        // `size_of::<cpu_set_t>()` bytes into it.
        unsafe {
            let mut set: cpu_set_t = std::mem::zeroed();
            (libc::sched_getaffinity(0, std::mem::size_of::<cpu_set_t>(), &mut set) == 0)
                .then_some(set)
        }
    }

    /// Sets the calling thread's allowed CPUs; whether the system accepted them.
    pub(super) fn set_allowed(set: &cpu_set_t) -> bool {
        // SAFETY: `set` is a valid `cpu_set_t` of the size passed, only read by the call.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<cpu_set_t>(), set) == 0 }
    }

    /// Forbids `cpu` to the calling thread if its set has another CPU; returns the set before.
    pub(super) fn exclude(cpu: usize) -> Option<cpu_set_t> {
        let before = allowed()?;
        if cpu >= CPU_SETSIZE as usize {
            return None;
        }
        let mut without = before;
        // SAFETY: `cpu` is below `CPU_SETSIZE`, so each bit access is inside the set.
        let others = unsafe {
            CPU_CLR(cpu, &mut without);
            CPU_ISSET(cpu, &before) && CPU_COUNT(&without) > 0
        };
        (others && set_allowed(&without)).then_some(before)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn same_set(a: &libc::cpu_set_t, b: &libc::cpu_set_t) -> bool {
        (0..libc::CPU_SETSIZE as usize).all(|c| {
            // SAFETY: `c` is below `CPU_SETSIZE`.
            #[allow(unsafe_code)]
            unsafe {
                libc::CPU_ISSET(c, a) == libc::CPU_ISSET(c, b)
            }
        })
    }

    fn count(set: &libc::cpu_set_t) -> i32 {
        // SAFETY: counting reads the set only.
        #[allow(unsafe_code)]
        unsafe {
            libc::CPU_COUNT(set)
        }
    }

    #[test]
    fn a_thread_moves_off_its_cpu_while_the_guard_lives_and_gets_its_set_back() {
        // On a thread of its own, so that the test harness's threads keep their sets whatever
        // happens here.
        std::thread::spawn(|| {
            let before = linux::allowed().expect("sched_getaffinity works on Linux");
            let here = current_cpu().expect("sched_getcpu works on Linux");
            let moved = move_off(Some(here));
            if count(&before) >= 2 {
                // The call migrates the thread before it returns.
                assert_ne!(current_cpu(), Some(here), "still on CPU {here}");
                let during = linux::allowed().unwrap();
                assert!(!same_set(&during, &before));
                assert_eq!(count(&during), count(&before) - 1);
            } else {
                // Pinned to one CPU: nowhere to go, and nothing changed.
                assert!(moved.saved.is_none());
                assert!(same_set(&linux::allowed().unwrap(), &before));
            }
            drop(moved);
            assert!(same_set(&linux::allowed().unwrap(), &before));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn no_cpu_named_or_one_past_the_set_size_changes_nothing() {
        std::thread::spawn(|| {
            let before = linux::allowed().unwrap();
            for cpu in [None, Some(libc::CPU_SETSIZE as usize), Some(usize::MAX)] {
                let moved = move_off(cpu);
                assert!(moved.saved.is_none(), "{cpu:?}");
                assert!(same_set(&linux::allowed().unwrap(), &before));
            }
        })
        .join()
        .unwrap();
    }
}
