"""schemathesis hooks of scripts/contract-test.

Whether a URL a tenant sets (agent_url, api_base_url) is taken depends on where its host
resolves (the egress policy: 422 for a host that does not resolve or resolves to an internal
address), which no schema can state. Schema-valid cases therefore carry a URL the server's
CB_EGRESS_ALLOW lets through; negative cases keep what was generated.
"""

import schemathesis

ALLOWED_URL = "http://127.0.0.1:9/contract"
URL_FIELDS = ("agent_url", "api_base_url")


@schemathesis.hook
def before_call(context, case, **kwargs):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return
    if isinstance(case.body, dict):
        for field in URL_FIELDS:
            if isinstance(case.body.get(field), str) and case.body[field] != "":
                case.body[field] = ALLOWED_URL


@schemathesis.hook
def filter_case(context, case):
    """Drops schema-valid cases that break a rule across fields the document can only say in
    words (422): bulk actions whose `since` is not before `until`, and a user's history asked
    with only one of `connector_id` and `chat_id`."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return True
    query = case.query if isinstance(case.query, dict) else {}
    if ("connector_id" in query) != ("chat_id" in query):
        return False
    if not isinstance(case.body, dict):
        return True
    since, until = case.body.get("since"), case.body.get("until")
    if not (isinstance(since, str) and isinstance(until, str)):
        return True
    try:
        return _instant(since) < _instant(until)
    except ValueError:
        return True


def _instant(text):
    from datetime import datetime

    return datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
