# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DCGM exporter's fields: its page in Prometheus' text format, and a Prometheus query's JSON vector."""

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.health.metrics import parse_text, parse_vector

# As dcgm-exporter 3.3 / 4.x serves :9400/metrics with the GPU Operator (NODE_NAME as Hostname, the pod mapping on).
EXPORTER_PAGE = "".join(line + "\n" for line in (
    "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
    "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
    'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-5f0c2a8e-1d3b-4c7a-9e21-0b6d4f8a7c13",'
    'pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",'
    'Hostname="gpu-node-1",DCGM_FI_DRIVER_VERSION="570.172.08"} 1410',
    "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
    "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
    'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-5f0c2a8e-1d3b-4c7a-9e21-0b6d4f8a7c13",'
    'pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",'
    'Hostname="gpu-node-1",DCGM_FI_DRIVER_VERSION="570.172.08",err_code="0",err_msg="No Error"} 0',
    'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-a1b2c3d4-0000-4c7a-9e21-0b6d4f8a7c14",'
    'pci_bus_id="00000000:0F:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",'
    'Hostname="gpu-node-1",DCGM_FI_DRIVER_VERSION="570.172.08",container="train",namespace="ml",'
    'pod="train-0",err_code="48",err_msg="DBE (Double Bit Error) ECC Error"} 48 1733120000000',
    "# HELP DCGM_FI_DEV_ROW_REMAP_FAILURE Whether remapping of rows has failed",
    "# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge",
    'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="1",UUID="GPU-a1b2c3d4-0000-4c7a-9e21-0b6d4f8a7c14",'
    'pci_bus_id="00000000:0F:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",'
    'Hostname="gpu-node-1"} 1',
    "# HELP DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS Number of remapped rows for uncorrectable errors",
    "# TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter",
    'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{gpu="1",UUID="GPU-a1b2c3d4-0000-4c7a-9e21-0b6d4f8a7c14",'
    'pci_bus_id="00000000:0F:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",'
    'Hostname="gpu-node-1"} 3',
))


def test_the_exporter_page_gives_the_health_fields_of_each_gpu_with_their_labels():
    samples = parse_text(EXPORTER_PAGE)
    assert [(sample["name"], sample["labels"]["gpu"], sample["value"]) for sample in samples] == [
        ("DCGM_FI_DEV_XID_ERRORS", "0", 0.0), ("DCGM_FI_DEV_XID_ERRORS", "1", 48.0),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "1", 1.0), ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "1", 3.0)]
    labels = samples[1]["labels"]
    assert (labels["UUID"], labels["pci_bus_id"], labels["Hostname"], labels["pod"], labels["err_msg"]) == (
        "GPU-a1b2c3d4-0000-4c7a-9e21-0b6d4f8a7c14", "00000000:0F:00.0", "gpu-node-1", "train-0",
        "DBE (Double Bit Error) ECC Error")


def test_label_values_are_unescaped_and_special_values_read():
    page = ('DCGM_FI_DEV_XID_ERRORS{gpu="0",err_msg="a \\"quoted\\" \\\\ path\\nline",Hostname="n"} NaN\n'
            'DCGM_FI_DEV_XID_ERRORS {} +Inf\n'
            'DCGM_FI_DEV_XID_ERRORS 79\n')
    samples = parse_text(page)
    assert samples[0]["labels"] == {"gpu": "0", "err_msg": 'a "quoted" \\ path\nline', "Hostname": "n"}
    assert samples[0]["value"] != samples[0]["value"]  # NaN
    assert [sample["value"] for sample in samples[1:]] == [float("inf"), 79.0]


def test_a_malformed_line_of_a_field_read_is_an_error_naming_it_and_other_metrics_are_skipped():
    assert parse_text('DCGM_FI_DEV_SM_CLOCK{gpu="0" broken\nDCGM_FI_DEV_XID_ERRORS_TOTAL 3\n') == []
    with pytest.raises(ValueError) as error:
        parse_text('DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID=unquoted} 48\n')
    assert "UUID=unquoted" in str(error.value)
    with pytest.raises(ValueError):
        parse_text('DCGM_FI_DEV_XID_ERRORS{gpu="0"} forty-eight\n')


def test_a_prometheus_vector_gives_the_same_samples_and_a_failed_query_is_an_error():
    answer = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_XID_ERRORS", "gpu": "1", "UUID": "GPU-a", "Hostname": "gpu-node-1",
                    "instance": "10.128.2.7:9400", "job": "nvidia-dcgm-exporter"},
         "value": [1733120000.123, "79"]}]}}
    assert parse_vector(answer, "DCGM_FI_DEV_XID_ERRORS") == [
        {"name": "DCGM_FI_DEV_XID_ERRORS", "labels": {"gpu": "1", "UUID": "GPU-a", "Hostname": "gpu-node-1",
                                                      "instance": "10.128.2.7:9400", "job": "nvidia-dcgm-exporter"},
         "value": 79.0}]
    with pytest.raises(ValueError) as error:
        parse_vector({"status": "error", "errorType": "bad_data", "error": "parse error"}, "X")
    assert str(error.value) == "the query of X failed: parse error"
    with pytest.raises(ValueError) as error:
        parse_vector({"status": "success", "data": {"resultType": "matrix", "result": []}}, "X")
    assert "matrix" in str(error.value)
