"""The object-storage preflight's answers that need no server: credential sources named, a key
file that cannot be read, nothing at all (instance metadata turned off)."""

from __future__ import annotations

from entrypoint.node.objectstore import check

NO_METADATA = {"AWS_EC2_METADATA_DISABLED": "true"}


def test_s3_without_any_credentials_says_what_to_set():
    found = check("s3://bucket/kimi", NO_METADATA)
    assert found.status == "error" and "AWS_ACCESS_KEY_ID" in found.message and "AWS_EC2_METADATA_DISABLED" in found.message


def test_s3_credentials_the_sdk_resolves_are_named_not_resolved():
    found = check("s3://bucket/kimi", {**NO_METADATA, "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token"})
    assert found.status == "warning" and "AWS_WEB_IDENTITY_TOKEN_FILE" in found.message


def test_s3_endpoint_that_does_not_answer_is_named():
    env = {**NO_METADATA, "AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "never-shown",
           "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    found = check("s3://bucket/kimi", env)
    assert found.status == "error" and "127.0.0.1:9" in found.message and "never-shown" not in found.message


def test_gs_key_file_must_be_readable(tmp_path):
    missing = check("gs://bucket/kimi", {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "nope.json")})
    assert missing.status == "error" and "nope.json" in missing.message
    key = tmp_path / "key.json"
    key.write_text("{}")
    assert check("gs://bucket/kimi", {"GOOGLE_APPLICATION_CREDENTIALS": str(key)}).status == "ok"


def test_gs_on_the_platform_uses_its_service_account():
    assert check("gs://bucket/kimi", {}, on_platform=True).status == "ok"
