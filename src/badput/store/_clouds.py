"""How an object store's client is configured: from the environment, the way each cloud's
own tools are (never a badput-only setting), and what its errors say.

- S3: obstore reads ``AWS_*`` (keys, session token, region, ``AWS_ENDPOINT_URL``) and the
  instance's role; badput adds ``AWS_PROFILE``'s keys, region and endpoint from the shared
  files, and plain HTTP when the endpoint's URL says ``http://`` (as the AWS CLI).
- GCS: obstore reads ``GOOGLE_APPLICATION_CREDENTIALS``, ``GOOGLE_SERVICE_ACCOUNT`` (or
  ``GOOGLE_SERVICE_ACCOUNT_PATH``), ``GOOGLE_SERVICE_ACCOUNT_KEY``, ``GOOGLE_BEARER_TOKEN``,
  ``GOOGLE_BASE_URL`` and the instance's service account; badput allows plain HTTP when the
  base URL (that variable, or a service account file's ``gcs_base_url``) says ``http://``.
- Azure: obstore reads ``AZURE_STORAGE_ACCOUNT_NAME``, ``AZURE_STORAGE_ACCOUNT_KEY``,
  ``AZURE_STORAGE_SAS_TOKEN``, ``AZURE_STORAGE_ENDPOINT``, ``AZURE_STORAGE_USE_EMULATOR`` and
  managed identities; badput adds ``AZURE_STORAGE_CONNECTION_STRING`` (what the Azure CLI
  and SDKs read: it wins over the separate variables, as there), and plain HTTP when the
  endpoint says ``http://``.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Final

from badput.runtime.optional import import_optional

__all__ = ["CREDENTIALS", "ObjectStoreError", "client_config", "failed", "make_client"]

#: What each cloud's tools read for credentials, as the error of a store without them says.
CREDENTIALS: Final = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or the instance's "
    "role), and AWS_ENDPOINT_URL for a store other than AWS",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS or GOOGLE_SERVICE_ACCOUNT (a service account's JSON "
    "file), GOOGLE_SERVICE_ACCOUNT_KEY (its JSON), or run on an instance with a service account",
    "az": "AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with "
    "AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN, or a managed identity)",
}

#: The most of the client's reason an error repeats.
_REASON_CHARS: Final = 600

#: Connection string keys (Azure's) -> obstore's Azure configuration keys.
_AZURE_KEYS: Final = {
    "accountname": "account_name",
    "accountkey": "account_key",
    "sharedaccesssignature": "sas_key",
    "blobendpoint": "endpoint",
}


class ObjectStoreError(OSError):
    """A request to an object store failed: the message names the store, what was asked,
    the client's reason (its first line), and, when credentials are missing or refused,
    the settings the cloud's tools read."""


def failed(uri: str, scheme: str, what: str, exc: BaseException) -> ObjectStoreError:
    """``exc`` (an obstore error) as an :class:`ObjectStoreError` that says what to set."""
    said = str(exc).split("Debug source:", 1)[0]  # obstore's text, before its debug dump
    code = re.search(r"<Code>(\w+)</Code>", said)  # the cloud's own error code, if it sent one
    reason = " ".join(re.sub(r"<[^>]*>", " ", said).split())[:_REASON_CHARS]
    reason = reason or type(exc).__name__
    if code is not None and code.group(1) not in reason:
        reason = f"{code.group(1)}: {reason}"
    text = f"{uri}: {what} failed: {reason}"
    name = type(exc).__name__
    lowered = reason.lower()
    if name in ("PermissionDeniedError", "UnauthenticatedError") or any(
        w in lowered
        for w in (
            "credential",
            "token request",
            "service account",
            "account must be specified",
            "169.254.169.254",  # the instance's metadata: where the client looked last
            "401 unauthorized",
            "403 forbidden",  # refused: a wrong key, or a role without the right
            "authorizationfailure",
            "accessdenied",
            "signaturedoesnotmatch",
            "invalidaccesskeyid",
        )
    ):
        text += f" (credentials: {CREDENTIALS[scheme]}; see docs/object-storage.md)"
    return ObjectStoreError(text)


def make_client(scheme: str, bucket: str) -> Any:
    """The obstore store of ``scheme://bucket``, configured from the environment."""
    store_mod = import_optional("obstore.store", scheme)
    config, options = client_config(scheme)
    retry = {"max_retries": 4, "retry_timeout": _timedelta(20.0)}
    return store_mod.from_url(
        f"{scheme}://{bucket}", config=config or None, client_options=options, retry_config=retry
    )


def client_config(scheme: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config, client_options)`` badput gives obstore for ``scheme`` beyond what obstore
    reads from the environment itself (see the module's text)."""
    options: dict[str, Any] = {"timeout": "30s", "connect_timeout": "5s"}
    config: dict[str, Any] = {}
    endpoint = ""
    if scheme == "s3":
        config = _aws_profile()
        endpoint = (
            os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or config.get("endpoint", "")
        )
    elif scheme == "gs":
        endpoint = os.environ.get("GOOGLE_BASE_URL") or _service_account_base_url()
    elif scheme == "az":
        config = _azure_connection_string(os.environ.get("AZURE_STORAGE_CONNECTION_STRING", ""))
        endpoint = config.get("endpoint") or os.environ.get(
            "AZURE_STORAGE_ENDPOINT", os.environ.get("AZURE_ENDPOINT", "")
        )
    if endpoint.startswith("http://"):  # as the cloud's own tools: the URL says plain HTTP
        options["allow_http"] = True
    return config, options


def _service_account_base_url() -> str:
    """The ``gcs_base_url`` of the service account file the environment names (an emulator's
    address; a real key file has none)."""
    for var in ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH"):
        path = os.environ.get(var)
        if path:
            try:
                with open(path, encoding="utf-8") as f:
                    value = json.load(f).get("gcs_base_url", "")
            except (OSError, ValueError, AttributeError):
                return ""
            return value if isinstance(value, str) else ""
    key = os.environ.get("GOOGLE_SERVICE_ACCOUNT_KEY")
    if key:
        try:
            value = json.loads(key).get("gcs_base_url", "")
        except (ValueError, AttributeError):
            return ""
        return value if isinstance(value, str) else ""
    return ""


def _azure_connection_string(text: str) -> dict[str, Any]:
    """obstore's Azure configuration from a connection string (``AccountName=...;
    AccountKey=...;BlobEndpoint=...``, or ``UseDevelopmentStorage=true`` for Azurite)."""
    config: dict[str, Any] = {}
    for field in text.split(";"):
        name, sep, value = field.partition("=")
        name = name.strip().lower()
        if not sep or not name:
            continue
        value = value.strip()
        if name in _AZURE_KEYS:
            config[_AZURE_KEYS[name]] = value
        elif name == "usedevelopmentstorage" and value.lower() == "true":
            config["use_emulator"] = True
    return config


def _timedelta(seconds: float) -> Any:
    import datetime  # noqa: PLC0415

    return datetime.timedelta(seconds=seconds)


def _aws_profile() -> dict[str, str]:
    """Keys, region and endpoint of ``AWS_PROFILE`` (or ``default``) from the shared files
    (``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_CONFIG_FILE``), for what the environment does
    not set: obstore reads the environment and instance roles, not profiles."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return {}
    import configparser  # noqa: PLC0415 (only an S3 client's first use)

    profile = os.environ.get("AWS_PROFILE") or "default"
    home = os.path.expanduser("~")
    creds = os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(
        home, ".aws", "credentials"
    )
    conf = os.environ.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config")
    out: dict[str, str] = {}
    wanted = {
        "aws_access_key_id": "access_key_id",
        "aws_secret_access_key": "secret_access_key",
        "aws_session_token": "token",
        "region": "region",
        "endpoint_url": "endpoint",
    }
    for path, section in (
        (conf, "default" if profile == "default" else f"profile {profile}"),
        (creds, profile),
    ):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except configparser.Error:
            continue
        if parser.has_section(section):
            for name, value in parser.items(section):
                if name in wanted and value:
                    out[wanted[name]] = value
    if "AWS_DEFAULT_REGION" in os.environ or "AWS_REGION" in os.environ:
        out.pop("region", None)
    return out
