//! Every fuzz target's committed seeds (`fuzz/seeds/TARGET`) through the checks its fuzzer
//! makes of each input (`fuzz/src`, the same source): found and mended inputs stay mended
//! without the instrumented build that exploring needs (`cargo xtask fuzz`).
use std::{collections::BTreeSet, path::Path};

#[path = "../fuzz/src/lib.rs"]
mod fuzz;

/// What a target checks of one input.
type Check = fn(&[u8]);

/// Each target, by its name, with its checks.
macro_rules! targets {
    ($($target:ident),* $(,)?) => {
        &[$((stringify!($target), fuzz::$target::check as Check)),*]
    };
}

const TARGETS: &[(&str, Check)] = targets![
    decode_record,
    elf_file,
    go_table,
    hostile_names,
    hotspot_walk,
    jitdump,
    perl_names,
    proc_text,
    python_code_object,
    python_line_table,
    raw_recording,
    ruby_names,
    task_event,
    unwind_stack,
    v8_walk,
];

fn fuzz_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz"))
}

/// The names of the entries of `dir`, without `extension` (the entries that have it).
fn names_in(dir: &str, extension: Option<&str>) -> BTreeSet<String> {
    std::fs::read_dir(fuzz_dir().join(dir))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| extension.is_none() || path.extension().and_then(|e| e.to_str()) == extension)
        .map(|path| path.file_stem().unwrap().to_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_seed_passes_its_targets_checks() {
    for &(target, check) in TARGETS {
        let seeds = fuzz_dir().join("seeds").join(target);
        let mut count = 0;
        for entry in std::fs::read_dir(&seeds).unwrap_or_else(|e| panic!("{}: {e}", seeds.display())) {
            let path = entry.unwrap().path();
            eprintln!("{}", path.display());
            check(&std::fs::read(&path).unwrap());
            count += 1;
        }
        assert!(count > 0, "{target} has no seed");
    }
}

#[test]
fn every_fuzz_target_has_seeds_run_here() {
    let here: BTreeSet<String> = TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(names_in("fuzz_targets", Some("rs")), here, "the targets of fuzz/fuzz_targets");
    assert_eq!(names_in("seeds", None), here, "the folders of fuzz/seeds");
}
