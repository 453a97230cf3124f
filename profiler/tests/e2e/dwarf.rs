//! End to end, as root: complete stacks for code built without frame pointers (DWARF CFI
//! unwinding of the copied user stack), in C, C++ and Rust, and through deep recursion.

use crate::common::*;

/// Every leaf sample must carry its whole chain (the bar: 99%).
const COMPLETE: f64 = 0.99;

#[test]
fn c_without_frame_pointers() {
    if !e2e_enabled() {
        return;
    }
    let workload = build_workload("split.c", "split-nofp", "gcc", &["-O2", "-g", "-fomit-frame-pointer"]);
    let folded = record_command(&scratch_dir("dwarf-c"), &[], &workload, &["4"]);
    assert_split(&folded, "main", 3.0, COMPLETE);
}

#[test]
fn cpp_templates_and_std_function_without_frame_pointers() {
    if !e2e_enabled() {
        return;
    }
    let workload = build_workload("split.cpp", "split-cpp", "g++", &["-O2", "-fomit-frame-pointer"]);
    let folded = record_command(&scratch_dir("dwarf-cpp"), &[], &workload, &["4"]);
    // Demangled names carry parameter lists: compare on what precedes them.
    let folded = folded.renamed(|frame| {
        let name = frame.split('(').next().unwrap_or(frame);
        name.strip_prefix("void ").unwrap_or(name).to_owned()
    });
    let expected: Vec<Expected> = [(0, 60.0), (1, 30.0), (2, 10.0)]
        .into_iter()
        .map(|(n, share)| {
            let leaf = format!("Leaf<{n}>::hot");
            let chain = [
                "main".into(),
                "burn".into(),
                "run_round".into(),
                format!("outer<Leaf<{n}> >"),
                format!("middle<Leaf<{n}> >"),
                format!("inner<Leaf<{n}> >"),
                leaf.clone(),
            ];
            Expected { leaf, share, chain: chain.to_vec() }
        })
        .collect();
    assert_profile(&folded, &expected, 3.0, COMPLETE);
}

#[test]
fn rust_release_binary() {
    if !e2e_enabled() {
        return;
    }
    // What `cargo build --release` does by default: optimized, no frame pointers, symbols kept.
    let workload = build_rust("split.rs", "split-rs", &["-C", "opt-level=3", "-C", "strip=debuginfo"]);
    let folded = record_command(&scratch_dir("dwarf-rust"), &[], &workload, &["4"]);
    let expected = split_expected("split::main", |f| format!("split::{f}"));
    assert_profile(&folded, &expected, 3.0, COMPLETE);
}

#[test]
fn recursion_200_frames_deep() {
    if !e2e_enabled() {
        return;
    }
    let workload = build_workload("recurse.c", "recurse", "gcc", &["-O2", "-fomit-frame-pointer"]);
    let folded = record_command(&scratch_dir("dwarf-recursion"), &[], &workload, &["4", "200"]);
    let mut chain = vec!["main".to_owned()];
    chain.extend(std::iter::repeat_n("descend".to_owned(), 200));
    chain.push("spin".into());
    // `main` right before the 200 frames: no frame lost or repeated.
    assert_profile(&folded, &[Expected { leaf: "spin".into(), share: 100.0, chain }], 0.0, COMPLETE);
}

#[test]
fn frame_pointer_build_with_frameless_leaves() {
    if !e2e_enabled() {
        return;
    }
    // GCC keeps leaf functions frameless even with -fno-omit-frame-pointer: the frame-pointer
    // chain skips each leaf's caller. The default call graph must not.
    let workload = build_workload("split.c", "split-fp-leaves", "gcc", &["-O2", "-fno-omit-frame-pointer"]);
    let dir = scratch_dir("dwarf-fp-leaves");
    let folded = record_command(&dir, &[], &workload, &["4"]);
    assert_split(&folded, "main", 3.0, COMPLETE);
    // And the frame-pointer call graph indeed misses it: the test would catch a regression.
    let fp_only = record_command(&dir, &["--call-graph", "fp", "-d", "1"], &workload, &["2"]);
    let (all, complete) = fp_only.leaf_samples("hot_a", &["a_inner", "hot_a"]);
    assert!(all > 0 && complete == 0, "fp call graph: {complete} of {all} hot_a samples show a_inner");
}

#[test]
fn through_cpp_exception_unwinding() {
    if !e2e_enabled() {
        return;
    }
    // Two threads throw std::invalid_argument from std::stoll("") and catch it, in a loop: many
    // samples land in libgcc's unwinder, some while it overwrites its own return address with
    // the handler's (uw_install_context).
    let workload = build_workload("stoll_throw.cpp", "stoll-throw", "g++", &["-O2", "-fomit-frame-pointer"]);
    let folded = record_command(&scratch_dir("dwarf-throw"), &["--per-thread"], &workload, &["4", "2"]);
    // Roots are `stoll-TID`; the main thread (the lowest TID) only starts and joins the workers.
    let roots = folded.roots();
    let main_thread = roots.keys().min_by_key(|root| thread_id(root)).cloned();
    let workers: Vec<&(Vec<String>, u64)> =
        folded.stacks.iter().filter(|(frames, _)| Some(&frames[0]) != main_thread.as_ref()).collect();
    let total: u64 = workers.iter().map(|(_, n)| n).sum();
    let whole = |frames: &[String]| {
        // __clone3 (as libc's symbol table names clone3), start_thread, libstdc++'s thread
        // routine, then the worker (or its cold part: its catch block).
        frames.len() > 4
            && frames[1..3] == ["__clone3", "start_thread"]
            && frames[4].starts_with("worker_loop(double)")
    };
    let complete: u64 = workers.iter().filter(|(frames, _)| whole(frames)).map(|(_, n)| n).sum();
    let share = complete as f64 / total as f64;
    let broken: Vec<String> = workers
        .iter()
        .filter(|(frames, _)| !whole(frames))
        .take(5)
        .map(|(f, n)| format!("{} {n}", f.join(";")))
        .collect();
    assert!(share >= 0.995, "{complete} of {total} worker samples reach the thread start; e.g. {broken:#?}");
    // Inside the unwinder, a whole stack has the thrower: __cxa_throw right above
    // _Unwind_RaiseException, then the frames that threw. (A stack whose caller is unknowable,
    // in the jump to the landing pad, ends there: lost, not made up.)
    let in_raise: Vec<&(Vec<String>, u64)> = workers
        .iter()
        .copied()
        .filter(|(frames, _)| whole(frames) && frames.iter().any(|f| f == "_Unwind_RaiseException"))
        .collect();
    let raise_samples: u64 = in_raise.iter().map(|(_, n)| n).sum();
    assert!(raise_samples * 10 > total, "{raise_samples} of {total} samples in _Unwind_RaiseException");
    let thrower = ["std::__throw_invalid_argument(char const*)", "__cxa_throw", "_Unwind_RaiseException"];
    for (frames, n) in in_raise {
        let at = frames.iter().position(|f| f == "_Unwind_RaiseException").unwrap();
        assert!(
            at >= 3 && frames[at - 2..=at] == thrower[..] && frames[at - 3].starts_with("parse_empty()"),
            "{} ({n} samples)",
            frames.join(";")
        );
    }
}

fn thread_id(root: &str) -> u32 {
    root.rsplit_once('-').and_then(|(_, tid)| tid.parse().ok()).unwrap_or(u32::MAX)
}
