//! What a database error means to its caller: no schema, a refused role, a value that cannot
//! be stored, a secret that would not open (an outage is `super::outage::is_unavailable`).

use super::APP_ROLE;

/// insufficient_privilege (a missing grant, a Citus worker login, a row RLS refuses): a
/// deployment fault, neither a missing schema nor an outage.
pub fn is_refused(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("42501"))
}

/// One cause of an error chain as the database error it is, shared (`Arc`) or not.
pub(super) fn sqlx_error<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a sqlx::Error> {
    cause.downcast_ref::<sqlx::Error>().or_else(|| {
        cause
            .downcast_ref::<std::sync::Arc<sqlx::Error>>()
            .map(AsRef::as_ref)
    })
}

/// A missing table, column, function, database or app role.
pub fn means_no_schema(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    match db.code().as_deref() {
        // undefined_table, undefined_column, undefined_function, invalid_catalog_name
        Some("42P01" | "42703" | "42883" | "3D000") => true,
        Some("22023") => db.message().contains(APP_ROLE),
        _ => false,
    }
}

pub fn secret_error(err: &sqlx::Error) -> Option<&crate::secrets::SecretError> {
    match err {
        sqlx::Error::Decode(source) => source.downcast_ref(),
        _ => None,
    }
}

/// A value that cannot be stored (NUL byte, bad encoding, too long): a 4xx, never a 500.
pub fn is_unstorable_value(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    // Class 22: data exceptions; 54000: index row size exceeds maximum.
    db.code()
        .is_some_and(|code| code.starts_with("22") || code == "54000")
        && !means_no_schema(err)
}
