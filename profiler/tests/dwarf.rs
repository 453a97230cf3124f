//! End to end, as root: complete stacks for code built without frame pointers (DWARF CFI
//! unwinding of the copied user stack), in C, C++ and Rust, and through deep recursion.
mod common;

use common::*;

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
