"""The preflight's S3 request is signed exactly as botocore signs it (AWS Signature Version 4)."""

from __future__ import annotations

import datetime

from entrypoint.node.objectstore import signed_list_request
from tests.cloud.conftest import need


def test_signature_matches_botocore():
    need("botocore")
    from unittest import mock

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.timezone.utc)
    ours = signed_list_request("http://127.0.0.1:9000", "weights", "Kimi-K2.5/", "eu-west-1", "AKIDEXAMPLE",
                               "secret/key+value", "session-token", now)
    theirs = AWSRequest(method="GET", url=ours.full_url, headers={})
    with mock.patch("botocore.auth.get_current_datetime", return_value=now.replace(tzinfo=None)):
        S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret/key+value", "session-token"), "s3", "eu-west-1").add_auth(theirs)
    assert ours.get_header("Authorization") == theirs.headers["Authorization"]
