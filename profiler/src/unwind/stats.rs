//! How the user stacks of a recording were obtained: counted per stack, summarized at the end.
use rustc_hash::FxHashMap;

use super::{UnwindEnd, hybrid::StackSource};
use crate::{
    address_space::{ModuleId, Modules},
    model::UnwindSummary,
};

/// Stack outcomes, of samples with user registers.
#[derive(Debug, Default)]
pub struct UnwindStats {
    by_source: FxHashMap<StackSource, u64>,
    /// Samples whose DWARF unwinding stopped in code without CFI, by module (`None`: anonymous
    /// memory).
    missing_cfi: FxHashMap<Option<ModuleId>, u64>,
}

impl UnwindStats {
    pub fn record(&mut self, source: StackSource) {
        *self.by_source.entry(source).or_default() += 1;
        if let StackSource::Dwarf(UnwindEnd::MissingCfi(module)) = source {
            *self.missing_cfi.entry(module).or_default() += 1;
        }
    }

    fn count(&self, source: StackSource) -> u64 {
        self.by_source.get(&source).copied().unwrap_or(0)
    }

    /// The outcomes, as the recording keeps them.
    pub fn summary(&self) -> UnwindSummary {
        UnwindSummary {
            complete: self.count(StackSource::Dwarf(UnwindEnd::Bottom))
                + self.count(StackSource::Dwarf(UnwindEnd::RuntimeBottom)),
            completed_with_frame_pointers: self.count(StackSource::DwarfThenFramePointers),
            truncated: self.count(StackSource::Dwarf(UnwindEnd::SnapshotEnd)),
            missing_cfi: self.missing_cfi.values().sum(),
            lost: self.count(StackSource::Dwarf(UnwindEnd::Lost)),
        }
    }

    /// The files where unwinding stopped for lack of CFI, by name, most samples first.
    pub fn missing_cfi(&self, modules: &Modules) -> Vec<(String, u64)> {
        let mut files: Vec<(String, u64)> = self
            .missing_cfi
            .iter()
            .map(|(module, &count)| {
                let name = module.map_or("[anonymous memory]".into(), |m| modules.get(m).name().to_owned());
                (name, count)
            })
            .collect();
        files.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        files
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_each_outcome() {
        let mut stats = UnwindStats::default();
        for source in [
            StackSource::Dwarf(UnwindEnd::Bottom),
            StackSource::Dwarf(UnwindEnd::RuntimeBottom),
            StackSource::DwarfThenFramePointers,
            StackSource::Dwarf(UnwindEnd::SnapshotEnd),
            StackSource::Dwarf(UnwindEnd::MissingCfi(None)),
            StackSource::Dwarf(UnwindEnd::MissingCfi(None)),
            StackSource::Dwarf(UnwindEnd::Lost),
        ] {
            stats.record(source);
        }
        let summary = stats.summary();
        assert_eq!(
            summary,
            UnwindSummary {
                complete: 2,
                completed_with_frame_pointers: 1,
                truncated: 1,
                missing_cfi: 2,
                lost: 1
            }
        );
        assert_eq!(stats.missing_cfi(&Modules::default()), [("[anonymous memory]".to_owned(), 2)]);
    }
}
