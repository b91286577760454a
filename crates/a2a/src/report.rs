//! Findings about a card, each tied to the JSON path it concerns.
//!
//! Parsing and validation collect every [`Problem`] instead of stopping at the first, so a
//! user fixing a card sees the whole list at once. Paths read like `skills[2].id`; a caller that
//! embeds the card in a larger document (an `AgentCard` manifest's `spec.card`) adds its prefix
//! with [`Problems::with_prefix`].

use std::fmt;

/// How serious a finding is: errors stop publication, warnings are reported only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The card cannot be published as it is.
    Error,
    /// The card can be published, but something looks wrong.
    Warning,
}

/// One finding: the path it concerns and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// JSON path of the offending value, e.g. `skills[2].id` (empty for the whole card).
    pub path: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
    /// Whether this stops publication.
    pub severity: Severity,
}

impl Problem {
    /// An error at `path`.
    pub fn error(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
            severity: Severity::Error,
        }
    }

    /// A warning at `path`.
    pub fn warning(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
            severity: Severity::Warning,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every error found in a card; the error type of parsing and validation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    /// Prefix every path with `prefix` (e.g. `spec.card`), as seen from an enclosing document.
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        for p in &mut self.0 {
            p.path = join_path(prefix, &p.path);
        }
        self
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

/// Join a prefix and a path: `join_path("spec.card", "skills[0]")` is `spec.card.skills[0]`.
pub fn join_path(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// Builds JSON paths while walking a card, so checks can name the field they look at.
#[derive(Clone, Debug, Default)]
pub struct PathBuf(String);

impl PathBuf {
    /// The path of a member named `name` below this one.
    pub fn field(&self, name: &str) -> PathBuf {
        PathBuf(join_path(&self.0, &key_segment(name)))
    }

    /// The path of element `i` below this one.
    pub fn index(&self, i: usize) -> PathBuf {
        PathBuf(format!("{}[{i}]", self.0))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A map key as a path segment: plain when it reads as an identifier, quoted otherwise.
fn key_segment(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        key.to_string()
    } else {
        format!("[{}]", serde_json::Value::String(key.to_string()))
    }
}
