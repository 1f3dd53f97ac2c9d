//! A secret flag's value may be `@/path` (the file's content) or `@-` (standard input), so a
//! secret never has to be an argument visible in `ps` (README.md#first-steps). No platform or
//! gateway secret starts with `@`, so a literal value is never mistaken for a reference. One
//! trailing line ending is dropped (`echo` adds one).

use std::io::Read;

use secrecy::SecretString;

pub fn parse(value: &str) -> Result<SecretString, String> {
    let Some(reference) = value.strip_prefix('@') else {
        return non_empty(value.to_owned());
    };
    let content = if reference == "-" {
        let mut content = String::new();
        std::io::stdin()
            .read_to_string(&mut content)
            .map_err(|err| format!("cannot read the secret from standard input: {err}"))?;
        content
    } else {
        // The path is the operator's own; the error names it, never the content.
        std::fs::read_to_string(reference)
            .map_err(|err| format!("cannot read the secret from {reference}: {err}"))?
    };
    non_empty(strip_line_ending(content))
}

fn strip_line_ending(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

fn non_empty(text: String) -> Result<SecretString, String> {
    if text.is_empty() {
        Err("the secret is empty".into())
    } else {
        Ok(SecretString::from(text))
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn a_value_is_itself_and_a_file_reference_is_the_file_without_its_line_ending() {
        assert_eq!(parse("xoxb-1").unwrap().expose_secret(), "xoxb-1");
        let dir = std::env::temp_dir().join(format!("cb-secret-{}", uuid::Uuid::new_v4()));
        std::fs::write(&dir, "s3cret\r\n").unwrap();
        let reference = format!("@{}", dir.display());
        assert_eq!(parse(&reference).unwrap().expose_secret(), "s3cret");
        std::fs::write(&dir, "two\nlines\n").unwrap();
        assert_eq!(parse(&reference).unwrap().expose_secret(), "two\nlines");
        std::fs::write(&dir, "\n").unwrap();
        assert!(parse(&reference).is_err(), "an empty file is no secret");
        std::fs::remove_file(&dir).unwrap();
        let missing = parse(&reference).unwrap_err();
        assert!(missing.contains(&dir.display().to_string()), "{missing}");
        assert!(parse("").is_err());
    }
}
