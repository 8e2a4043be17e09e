"""Can this container read the model from object storage (s3://, gs://)? Asked before a 600 GB load.

S3 (and S3-compatible stores): with a key pair in the environment, one signed ListObjectsV2
request (AWS Signature Version 4, standard library only) proves the endpoint answers, the
credentials are accepted and the prefix holds a checkpoint (config.json and *.safetensors).
Other credential sources the AWS SDK resolves (profile, web identity, container credentials,
instance metadata) are named, not resolved. GCS: a key file or the metadata server.
Every network read is bounded in time and size; secrets never appear in a message.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from typing import Mapping, Optional

from entrypoint.core.base import bounded, limits
from entrypoint.core.base.check import Check
from entrypoint.core.base.files import read_capped
from entrypoint.core.base.net import connect
from entrypoint.core.data.platforms import load_platforms

METADATA_TIMEOUT_S = 1.0
WEIGHTS_SUFFIX = ".safetensors"
CONFIG = "config.json"


CHECK = "model_source"


def Verdict(status: str, message: str) -> Check:  # noqa: N802 - reads as the record it makes
    return Check(CHECK, status, message)


def _first(environ: Mapping[str, str], names) -> Optional[str]:
    for name in names:
        if environ.get(name):
            return environ[name]
    return None


def _reachable(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    try:
        with connect(parts.hostname or "", parts.port or 80, METADATA_TIMEOUT_S):  # the name lookup bounded too
            return True
    except OSError:
        return False


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_list_request(endpoint: str, bucket: str, prefix: str, region: str, key_id: str, secret: str,
                        token: Optional[str], now: datetime.datetime) -> urllib.request.Request:
    """A SigV4-signed ListObjectsV2 GET (path-style addressing)."""
    base = urllib.parse.urlsplit(endpoint)
    path = (base.path.rstrip("/") + "/" + urllib.parse.quote(bucket, safe="-_.~"))
    query = sorted({"list-type": "2", "prefix": prefix, "max-keys": "1000"}.items())
    canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                               for k, v in query)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(b"").hexdigest()
    headers = {"host": base.netloc, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    if token:
        headers["x-amz-security-token"] = token
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["GET", path, canonical_query, "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
                           signed, payload])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _sign(_sign(_sign(_sign(("AWS4" + secret).encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, SignedHeaders={signed}, "
                                f"Signature={signature}")
    url = f"{base.scheme}://{base.netloc}{path}?{canonical_query}"
    return urllib.request.Request(url, headers={k: v for k, v in headers.items() if k != "host"}, method="GET")


def _error_code(body: bytes) -> str:
    try:
        return ET.fromstring(body).findtext("Code") or ""
    except ET.ParseError:
        return ""


def _keys(body: bytes):
    return [el.text or "" for el in ET.fromstring(body).iter() if el.tag.rsplit("}", 1)[-1] == "Key"]


def check_s3(uri: str, environ: Mapping[str, str]) -> Check:
    store = load_platforms().object_storage.schemes["s3"]
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    region = _first(environ, store.region_env) or store.default_region
    endpoint = _first(environ, store.endpoint_env) or store.default_endpoint.format(region=region)
    key_id, secret = (environ.get(name) for name in store.key_env)
    if not (key_id and secret):
        others = [name for name in store.other_credentials_env if environ.get(name)]
        if others:
            return Verdict("warning", f"{uri}: credentials come from {', '.join(others)}, which preflight does not "
                           "resolve; vLLM's loader will (an error then appears when loading starts).")
        disabled = (environ.get(store.metadata_disabled_env or "", "") or "").strip().lower() == "true"
        if not disabled and _reachable(store.metadata_url):
            return Verdict("ok", f"{uri}: credentials from the instance metadata service (the instance's role)")
        why = f"{store.metadata_disabled_env}=true" if disabled else "no instance metadata service answers"
        return Verdict("error", f"{uri}: no credentials to read it: {' and '.join(store.key_env)} are not set, nor "
                       f"any of {', '.join(store.other_credentials_env)}, and {why}. Give the container credentials "
                       "(e.g. -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY, or an instance/task role), "
                       f"and for an S3-compatible store its {store.endpoint_env[-1]}.")
    token = environ.get(store.session_env) if store.session_env else None
    request = signed_list_request(endpoint, bucket, prefix, region, key_id, secret, token,
                                  datetime.datetime.now(datetime.timezone.utc))
    where = f"{uri} at {endpoint} (region {region})"
    try:  # one deadline for connect + headers + body: a store that drips bytes cannot hold the start
        resp = bounded.request("GET", request.full_url, timeout=limits.OBJECT_STORE_DEADLINE_S,
                               max_bytes=limits.MAX_OBJECT_LISTING_BYTES, headers={"Host": urllib.parse.urlsplit(endpoint).netloc, **dict(request.header_items())})
    except bounded.Late:
        return Verdict("error", f"{where}: the endpoint did not answer within {limits.OBJECT_STORE_DEADLINE_S:g} s "
                       f"in all. Check {' / '.join(store.endpoint_env)} and the network.")
    except bounded.HttpError as exc:
        return Verdict("error", f"{where}: the endpoint does not answer ({exc}). Check "
                       f"{' / '.join(store.endpoint_env)} and the network.")
    body = resp.content
    if resp.status_code >= 300:
        code = _error_code(body[:65536]) or f"HTTP {resp.status_code}"
        hint = {"NoSuchBucket": "the bucket does not exist there: check the URI, the region and the endpoint",
                "AccessDenied": "the credentials may not list it: grant s3:ListBucket and s3:GetObject",
                "InvalidAccessKeyId": "the key id is not known to this endpoint",
                "SignatureDoesNotMatch": "the secret key does not match the key id"}.get(code, "see the code")
        return Verdict("error", f"{where}: {code}: {hint}.")
    try:
        keys = _keys(body)
    except ET.ParseError:
        return Verdict("error", f"{where}: the listing is not S3 XML; is the endpoint an S3 API?")
    names = {k[len(prefix):] for k in keys if k.startswith(prefix)}
    weights = [n for n in names if n.endswith(WEIGHTS_SUFFIX)]
    if CONFIG not in names or not weights:
        missing = " and ".join(m for m, ok in ((CONFIG, CONFIG in names), (f"*{WEIGHTS_SUFFIX}", weights)) if not ok)
        return Verdict("error", f"{where}: readable, but {missing} not found under the prefix ({len(names)} object(s)). "
                       "Upload the Hugging Face checkpoint directory itself (config.json beside the safetensors).")
    return Verdict("ok", f"{where}: readable with the given credentials; {CONFIG} and {len(weights)} safetensors file(s)")


def check_gs(uri: str, environ: Mapping[str, str], on_platform: bool) -> Check:
    store = load_platforms().object_storage.schemes["gs"]
    key_file = _first(environ, store.other_credentials_env)
    if key_file:
        try:
            read_capped(key_file, limits.MAX_KEY_FILE_BYTES)
        except OSError as exc:
            return Verdict("error", f"{uri}: {store.other_credentials_env[0]} names {key_file}, which cannot be read "
                           f"({exc.strerror}). Mount the key file there.")
        return Verdict("ok", f"{uri}: credentials from the key file named by {store.other_credentials_env[0]}")
    if on_platform or _reachable(store.metadata_url):
        return Verdict("ok", f"{uri}: credentials from the metadata server (the service account)")
    return Verdict("error", f"{uri}: no credentials to read it: {store.other_credentials_env[0]} is not set and no "
                   "metadata server answers. Mount a service-account key and set it, or run on Google Cloud.")


_BY_SCHEME = {"s3": lambda uri, environ, on_platform: check_s3(uri, environ), "gs": check_gs}


def check(uri: str, environ: Mapping[str, str], on_platform: bool = False) -> Check:
    """`on_platform`: the container runs on a cloud platform whose metadata server gives credentials."""
    return _BY_SCHEME[uri.partition("://")[0]](uri, environ, on_platform)
