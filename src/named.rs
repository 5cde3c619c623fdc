//! [`named!`]: the one way an enum whose names are stored or typed is declared (an artifact
//! table, an extract's outcome, a stage's status, …): each name spelled once, and the serde
//! name, `Display`, `name()`, `named()` and `ALL` all read it.

/// Declares a unit-only enum whose serde name, [`std::fmt::Display`] and `name()` are the given
/// strings, with `ALL` in declaration order and `named()` to look a name up.
macro_rules! named {
    ($(#[$meta:meta])* $vis:vis enum $ty:ident { $($(#[$doc:meta])* $v:ident = $name:literal,)* }) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            ::serde::Serialize, ::serde::Deserialize,
        )]
        $vis enum $ty {
            $($(#[$doc])* #[serde(rename = $name)] $v,)*
        }

        impl $ty {
            /// Every value, in declaration (and report) order.
            pub const ALL: &'static [$ty] = &[$($ty::$v,)*];

            /// The value's name, as tables and records store it.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$v => $name,)*
                }
            }

            /// The value named `name`, if there is one.
            pub fn named(name: &str) -> Option<$ty> {
                $ty::ALL.iter().copied().find(|v| v.name() == name)
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
