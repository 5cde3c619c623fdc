//! File names as the artifacts store them: byte-exact. A path that is valid UTF-8 is stored as
//! it is. Each byte of a path that is not valid UTF-8 (a Latin-1 `caf\xe9.md`) is stored as the
//! private-use character U+10FF00 + byte, so the original bytes come back exactly and the file
//! can be read again; such a character in a name, should one occur, is itself stored byte by
//! byte, which keeps the mapping one-to-one.

const BASE: u32 = 0x10FF00;

fn escaped(c: char) -> bool {
    (BASE..=BASE + 0xFF).contains(&(c as u32))
}

fn push_byte(out: &mut String, b: u8) {
    out.push(char::from_u32(BASE + b as u32).expect("U+10FF00..=U+10FFFF are characters"));
}

/// The stored form of a path given as bytes.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if escaped(c) {
                let mut buf = [0u8; 4];
                for &b in c.encode_utf8(&mut buf).as_bytes() {
                    push_byte(&mut out, b);
                }
            } else {
                out.push(c);
            }
        }
        for &b in chunk.invalid() {
            push_byte(&mut out, b);
        }
    }
    out
}

/// The bytes of a stored path.
pub fn decode(stored: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(stored.len());
    for c in stored.chars() {
        if escaped(c) {
            out.push((c as u32 - BASE) as u8);
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    out
}

/// A stored path as an OS path (Unix: its exact bytes).
#[cfg(unix)]
pub fn to_path(stored: &str) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(&decode(stored)).into()
}

/// A stored path as an OS path (elsewhere: the name as written).
#[cfg(not(unix))]
pub fn to_path(stored: &str) -> std::path::PathBuf {
    stored.into()
}

/// The stored form of an OS path component.
#[cfg(unix)]
pub fn of_os(s: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    encode(s.as_bytes())
}

/// The stored form of an OS path component.
#[cfg(not(unix))]
pub fn of_os(s: &std::ffi::OsStr) -> String {
    s.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_paths_are_unchanged_and_others_round_trip() {
        assert_eq!(encode("src/lib.rs".as_bytes()), "src/lib.rs");
        assert_eq!(encode("docs/café.md".as_bytes()), "docs/café.md");
        let latin1 = b"docs/caf\xe9.md";
        let stored = encode(latin1);
        assert!(!stored.contains('\u{FFFD}'));
        assert_eq!(decode(&stored), latin1);
        let odd = "x\u{10FF41}y".as_bytes();
        assert_eq!(decode(&encode(odd)), odd);
        assert_ne!(encode(odd), encode(b"xAy"));
        for bytes in [&b"\xff\xfe"[..], b"a\xc3", b"\xf4\x8f\xbc\x80", b""] {
            assert_eq!(decode(&encode(bytes)), bytes);
        }
    }
}
