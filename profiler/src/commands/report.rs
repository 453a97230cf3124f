//! `profiler report` and `profiler diff`: rendering raw recordings again, without root.
use std::{fs::File, io::BufReader, path::Path};

use anyhow::{Context as _, Result, bail};

use crate::{
    cli::{DiffArgs, ReportArgs},
    model::{Recording, raw},
    output::{self, OutputFile},
    render::{folded, svg},
};

pub(super) fn run(args: &ReportArgs) -> Result<()> {
    let outputs = args.output.resolve()?;
    let files = outputs.create()?;
    let recording = load(&args.recording)?.filtered(&args.filter.filter());
    output::write_all(files, &recording, &args.grouping.render_options())?;
    let written: Vec<String> = outputs.paths().iter().map(|(path, _)| path.display().to_string()).collect();
    eprintln!("profiler: {} samples, wrote {}", recording.sample_count(), written.join(", "));
    Ok(())
}

pub(super) fn diff(args: &DiffArgs) -> Result<()> {
    let output = OutputFile::create(&args.output)?;
    let filter = args.filter.filter();
    let before = load(&args.before)?.filtered(&filter);
    let after = load(&args.after)?.filtered(&filter);
    if before.meta.weight != after.meta.weight {
        bail!(
            "cannot compare {} with {}: one counts {}, the other {}",
            args.before.display(),
            args.after.display(),
            before.meta.weight.unit(),
            after.meta.weight.unit()
        );
    }
    let grouping = args.grouping.grouping();
    let titles = svg::Titles {
        title: format!("profiler: {} → {}", before.meta.target, after.meta.target),
        subtitle: Some(format!(
            "{} → {} {}{}; red grew, blue shrank",
            before.total_weight(),
            after.total_weight(),
            after.meta.weight.unit(),
            if args.normalize { " (normalized)" } else { "" }
        )),
        count_name: after.meta.weight.unit(),
    };
    let (before, after) = match args.grouping.no_lines {
        true => (before.without_script_lines(), after.without_script_lines()),
        false => (before, after),
    };
    let by_label = args.grouping.by_label.as_deref();
    let (before, after) =
        (folded::collapse(&before, grouping, by_label), folded::collapse(&after, grouping, by_label));
    output.commit(|out| svg::write_diff(&before, &after, args.normalize, &titles, out))?;
    eprintln!("profiler: wrote {}", args.output.display());
    Ok(())
}

/// Reads a raw recording; every failure is one line naming the file.
fn load(path: &Path) -> Result<Recording> {
    let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    raw::read(&mut BufReader::new(file)).with_context(|| path.display().to_string())
}
