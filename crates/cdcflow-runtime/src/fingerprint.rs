//! Fingerprints of text kept in checkpoints: the same text gives the same fingerprint in
//! every build and on every toolchain (SHA-256, not std's randomly keyed hasher), and the
//! text cannot be read back from it. A materialized view's query may hold values
//! substituted from `--conf`, credentials among them, so its checkpoint keeps only this.

use sha2::{Digest, Sha256};

/// The SHA-256 of `text`, in lowercase hex.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_standard_sha256() {
        // FIPS 180-2, appendix B.1.
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
