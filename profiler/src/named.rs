//! Values known by a name on the command line and in the recording (`--format svg`,
//! `--call-graph dwarf`): one table per type, read both ways.

/// A type whose values each have a name.
pub(crate) trait Named: Copy + PartialEq + 'static {
    /// Every value, by its name.
    const NAMES: &'static [(&'static str, Self)];

    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, value)| *value == self)
            .map(|(name, _)| *name)
            .expect("every value is named")
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::NAMES.iter().find(|(known, _)| *known == name).map(|(_, value)| *value)
    }
}
