//! The hooks a plugin can implement. The list comes from one declaration, the
//! WIT world `registrar-policy` (`wit/policy.wit`): the build script turns it
//! into `for_each_hook!`, which defines [`Hook`] here and the host's guest
//! indices in `wasm::plugin`; the SDK's build script reads the same world.

include!(concat!(env!("OUT_DIR"), "/hooks.rs"));
#[cfg(feature = "wasm")]
pub(crate) use for_each_hook;

macro_rules! define_hooks {
    ($(($variant:ident, $name:literal, $module:ident),)*) => {
        /// A decision a plugin can take part in.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize, serde::Serialize,
        )]
        pub enum Hook {
            $(
                #[doc = concat!("`", $name, "`")]
                #[serde(rename = $name)]
                $variant,
            )*
        }

        impl Hook {
            /// Every hook, in the WIT world's order.
            pub const ALL: &[Hook] = &[$(Hook::$variant),*];

            /// The name used in the TOML file, in logs and metrics, and in the WIT interface.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Hook::$variant => $name,)*
                }
            }
        }
    };
}

for_each_hook!(define_hooks);

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Hook {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Hook::ALL
            .iter()
            .copied()
            .find(|h| h.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<_> = Hook::ALL.iter().map(|h| h.as_str()).collect();
                format!("unknown hook {s:?} (expected one of {})", known.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_the_wit_worlds_hooks() {
        let names: Vec<_> = Hook::ALL.iter().map(|h| h.as_str()).collect();
        assert_eq!(names, ["driver-name", "versions", "failure", "endpoint"]);
        assert_eq!("failure".parse::<Hook>(), Ok(Hook::Failure));
        assert_eq!(
            "rename".parse::<Hook>().unwrap_err(),
            "unknown hook \"rename\" (expected one of driver-name, versions, failure, endpoint)"
        );
    }
}
