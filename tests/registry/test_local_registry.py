"""module_utils/registry/client.py against a real OCI registry (tools/localregistry) on loopback: TLS with a test CA,
basic auth or bearer tokens from a pull secret, mirror rules whose sources do not exist (the `.invalid` domain never resolves,
so no request leaves the machine)."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.registry.mirrors import mirror_rules
from ansible_collections.accelerators.gpu.plugins.module_utils.registry.client import (
    CONNECTION, FOUND, NOT_FOUND, TLS, UNAUTHORIZED, RegistryClient, urllib_transport)

pytestmark = pytest.mark.registry

SOURCE = "nvcr.invalid/nvidia"
KERNEL = "5.14.0-427.33.1.el9_4.x86_64"
KERNEL_OCI_INDEX = "5.14.0-427.50.1.el9_4.x86_64"
KERNEL_UNPUBLISHED = "5.14.0-570.42.1.el9_6.x86_64"


def tag(kernel):
    return "535-%s-rhcos4.18" % kernel


def tag_mirror(registry, policy=None):
    entry = {"source": SOURCE, "mirrors": [registry.host + "/nvidia"]}
    if policy:
        entry["mirrorSourcePolicy"] = policy
    return mirror_rules(itms=[{"metadata": {"name": "local"}, "spec": {"imageTagMirrors": [entry]}}])


def client(registry, rules=(), secrets=None, **transport):
    transport.setdefault("ca_file", registry.ca_file)
    return RegistryClient(urllib_transport(timeout=5, **transport),
                          [registry.pull_secret()] if secrets is None else secrets, rules)


def test_found_through_a_tag_mirror_with_the_pull_secret(local_registry, precompiled_drivers):
    result = client(local_registry, tag_mirror(local_registry)).image_exists("%s/driver:%s" % (SOURCE, tag(KERNEL)))
    mirrored = "%s/nvidia/driver:%s" % (local_registry.host, tag(KERNEL))
    assert (result["exists"], result["found"], result["digest"]) == (True, mirrored, precompiled_drivers[KERNEL])
    # The mirror answered first, so the source was never asked.
    assert [(a["reference"], a["status"], a["reason"]) for a in result["attempts"]] == [(mirrored, 200, FOUND)]
    assert local_registry.password not in repr(result)


def test_oci_index_and_digest_references(local_registry, precompiled_drivers):
    """An OCI index is found (the Accept header lists index types), and a digest through a digest mirror."""
    checker = client(local_registry)
    index = checker.image_exists("%s/nvidia/driver:%s" % (local_registry.host, tag(KERNEL_OCI_INDEX)))
    assert index["exists"] and index["digest"] == precompiled_drivers[KERNEL_OCI_INDEX]

    digest = precompiled_drivers[KERNEL]
    rules = mirror_rules(idms=[{"metadata": {"name": "local"}, "spec": {"imageDigestMirrors": [
        {"source": SOURCE, "mirrors": [local_registry.host + "/nvidia"]}]}}])
    by_digest = client(local_registry, rules).image_exists("%s/driver@%s" % (SOURCE, digest))
    assert by_digest["found"] == "%s/nvidia/driver@%s" % (local_registry.host, digest)


def test_missing_tag_is_not_found_and_the_unreachable_source_is_named(local_registry, precompiled_drivers):
    result = client(local_registry, tag_mirror(local_registry)).image_exists(
        "%s/driver:%s" % (SOURCE, tag(KERNEL_UNPUBLISHED)))
    assert (result["exists"], result["found"]) == (False, None)
    mirror, source = result["attempts"]
    assert (mirror["status"], mirror["reason"]) == (404, NOT_FOUND)
    assert mirror["message"] == "manifest unknown"  # a HEAD answer has no error body
    assert (source["reference"], source["reason"]) == ("%s/driver:%s" % (SOURCE, tag(KERNEL_UNPUBLISHED)), CONNECTION)
    assert source["message"].startswith("nvcr.invalid: cannot connect:")

    blocked = client(local_registry, tag_mirror(local_registry, "NeverContactSource")).image_exists(
        "%s/driver:%s" % (SOURCE, tag(KERNEL_UNPUBLISHED)))
    assert [a["reason"] for a in blocked["attempts"]] == [NOT_FOUND]


def test_credentials_missing_or_wrong(local_registry, precompiled_drivers):
    image = "%s/nvidia/driver:%s" % (local_registry.host, tag(KERNEL))
    [anonymous] = client(local_registry, secrets=[]).image_exists(image)["attempts"]
    assert (anonymous["status"], anonymous["reason"]) == (401, UNAUTHORIZED)
    assert "no credentials for %s" % local_registry.host in anonymous["message"]

    wrong = local_registry.pull_secret(password="not-the-password")
    [refused] = client(local_registry, secrets=[wrong]).image_exists(image)["attempts"]
    assert (refused["status"], refused["reason"], refused["message"]) == (
        401, UNAUTHORIZED, "the credentials for %s were refused" % local_registry.host)


def test_tls_needs_the_registry_ca_unless_verification_is_off(local_registry, precompiled_drivers):
    image = "%s/nvidia/driver:%s" % (local_registry.host, tag(KERNEL))
    [untrusted] = client(local_registry, ca_file=None).image_exists(image)["attempts"]
    assert untrusted["reason"] == TLS
    assert untrusted["message"] == "%s: TLS: certificate verify failed: unable to get local issuer certificate" % (
        local_registry.host)
    assert client(local_registry, ca_file=None, verify=False).image_exists(image)["exists"] is True


def test_bearer_token_flow_through_a_mirror(token_registry):
    token_registry.push("nvidia/driver", [tag(KERNEL), tag(KERNEL_OCI_INDEX)])
    checker = client(token_registry, tag_mirror(token_registry))
    issued = token_registry.token_service.issued
    for kernel in (KERNEL, KERNEL_OCI_INDEX):
        result = checker.image_exists("%s/driver:%s" % (SOURCE, tag(kernel)))
        assert result["found"] == "%s/nvidia/driver:%s" % (token_registry.host, tag(kernel))
    # One token, scoped to the repository, serves every check of it.
    assert token_registry.token_service.issued == issued + 1
    assert [a["reason"] for a in checker.image_exists("%s/driver:%s" % (SOURCE, tag(KERNEL_UNPUBLISHED)))[
        "attempts"]] == [NOT_FOUND, CONNECTION]

    [anonymous] = client(token_registry, secrets=[]).image_exists(
        "%s/nvidia/driver:%s" % (token_registry.host, tag(KERNEL)))["attempts"]
    assert (anonymous["status"], anonymous["reason"]) == (401, UNAUTHORIZED)
    assert anonymous["message"] == "token service %s answered HTTP 401 (no credentials for %s in the pull secrets)" % (
        token_registry.token_service.realm, token_registry.host)
