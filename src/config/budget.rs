//! A token budget: what a packer may fill, 1 to [`Budget::MAX`] tokens. One type for every way
//! a budget arrives (a pipeline's variant, `ask --budget`, the service's `budget=`), so each is
//! checked the same way and stored as the 32-bit number `summary` holds.

use std::num::NonZeroU32;

/// A token budget within 1..=[`Budget::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Budget(NonZeroU32);

impl Budget {
    /// The largest budget a variant or a question may have.
    pub const MAX: u32 = 10_000_000;

    /// `tokens` as a budget, or why it is not one.
    pub fn new(tokens: u64) -> Result<Budget, String> {
        u32::try_from(tokens)
            .ok()
            .filter(|&t| t <= Budget::MAX)
            .and_then(NonZeroU32::new)
            .map(Budget)
            .ok_or_else(|| {
                format!(
                    "a budget must be within 1..={} tokens, not {tokens}",
                    Budget::MAX
                )
            })
    }

    /// The budget in tokens.
    pub fn tokens(self) -> u32 {
        self.0.get()
    }

    /// The budget in tokens, as a count.
    pub fn get(self) -> usize {
        self.0.get() as usize
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Budget, String> {
        let n: u64 = s
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a number of tokens"))?;
        Budget::new(n)
    }
}

impl serde::Serialize for Budget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.tokens())
    }
}

impl<'de> serde::Deserialize<'de> for Budget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Budget, D::Error> {
        let n = u64::deserialize(d)?;
        Budget::new(n).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_checked_the_same_way_from_text_numbers_and_json() {
        assert_eq!("1400".parse::<Budget>().unwrap().get(), 1400);
        for bad in ["0", "10000001", "-3", "x", "99999999999"] {
            let e = bad.parse::<Budget>().unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        let b: Budget = serde_json::from_str("700").unwrap();
        assert_eq!(
            (b.tokens(), serde_json::to_string(&b).unwrap()),
            (700, "700".into())
        );
        assert!(serde_json::from_str::<Budget>("0").is_err());
        assert_eq!(
            Budget::new(Budget::MAX as u64).unwrap().tokens(),
            Budget::MAX
        );
    }
}
