"""The frameworks' wordings: what torch_npu, MindSpore, vLLM (vllm-ascend) and CANN print.

The catalog (``rules``) names each failure once; a framework words the same
out-of-memory or stream shortage its own way, and stops a job on a faulty
device with messages of its own. Those wordings are kept here, each with
where it comes from, and joined to the catalog's rules in ``rules``:
``OOM`` to ``device-oom``, ``STREAMS`` to ``stream-exhausted``, and the two
device-abnormal rules, ``DEVICE_TASK_ABORT`` and ``DEVICE_MEMORY_FAULT``,
are rules of their own.
"""

from __future__ import annotations

from suspendguard.logs.matching import ERROR, Pattern, Rule, needle, wording

# Out of device memory, as the frameworks say it (rule device-oom).
OOM: tuple[Pattern, ...] = (
    # MindSpore's static memory pool, ascend_memory_adapter.cc (MallocStaticDevMem) in
    # https://github.com/mindspore-ai/mindspore: "#umsg#Framework Error Message:#umsg#Out of
    # Memory!!! Request memory size: " << size << "B, Memory Statistic:"; as printed, in
    # MindSpore's heterogeneous storage tutorial (https://gitee.com/mindspore/docs):
    # "Out of Memory!!! Request memory size: 33100113920B, Memory Statistic:".
    needle("Out of Memory!!! Request memory size"),
    # torch_npu's text for 207018 (ACL_ERROR_RT_DEVICE_OOM), NPUErrorCodes.h in
    # https://github.com/Ascend/pytorch: "[Error]: The memory on the device is exhausted."
    needle("The memory on the device is exhausted"),
    # vLLM's check of the KV cache, which vllm-ascend runs (kv_cache_utils.py,
    # check_enough_kv_cache_memory); vllm-ascend issue 5707
    # (https://github.com/vllm-project/vllm-ascend/issues/5707): "ValueError: No available
    # memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing
    # the engine."
    needle("No available memory for the cache blocks"),
    # (torch_npu's "NPU out of memory. Tried to allocate ..." and its torch.OutOfMemoryError
    # form, sglang issue 29838, are the rule's own wording "NPU out of memory"; CANN's
    # "Memory_Allocation_Failure(EL0004): Failed to allocate memory requested by GE module."
    # (PKU-YuanGroup/Helios issue 62) is named by EL0004. torch_npu's "[Error]: Failed to
    # apply for memory." is left out: it prints it for 207005 too, a stream shortage in
    # vllm-ascend issue 8393, where 207001 or EL0004 name a real out-of-memory anyway.)
)

# Out of streams, as the frameworks say it (rule stream-exhausted).
STREAMS: tuple[Pattern, ...] = (
    # torch_npu's text for 207008 (ACL_ERROR_RT_NO_STREAM_RESOURCE), NPUErrorCodes.h in
    # https://github.com/Ascend/pytorch, and CANN's EL0009 line, both in vllm-ascend issue 9691
    # (https://github.com/vllm-project/vllm-ascend/issues/9691): "[Error]: Stream resources
    # are insufficient." and "Insufficient_Stream_Resources(EL0009): The stream resources are
    # insufficient."; vllm-ascend's acl_graph.py looks for the same marker.
    wording("Stream resources are insufficient", "tream resources are insufficient"),
    wording("stream resources are insufficient", "tream resources are insufficient"),
    # vllm-ascend re-raises a failed ACL graph capture with this guidance
    # (vllm_ascend/compilation/acl_graph.py, _STREAM_RESOURCE_GUIDANCE): "ACL graph capture
    # failed with a known stream-resource exhaustion signature. Consider upgrading ...".
    needle("known stream-resource exhaustion signature"),
    # The same file's marker for older HDKs (_OLD_HDK_CAPTURE_ERROR_MARKERS, "alloc sq cq
    # fail"), as CANN prints it in vllm-ascend issue 8393
    # (https://github.com/vllm-project/vllm-ascend/issues/8393): "[SqCqManage]Alloc sq cq
    # fail, stream_id=1984, retCode=0x7020023."
    needle("Alloc sq cq fail"),
    # vllm-ascend issue 9564 (https://github.com/vllm-project/vllm-ascend/issues/9564), "not
    # enough streams in graph mode": "Create capture stream failed, stream_id=1987,
    # event_id=-1, error=117571619." (0x7020023, the stream shortage, in decimal).
    needle("Create capture stream failed", "error=117571619"),
)



def _thrown(word: str) -> tuple[Pattern, ...]:
    """torch_npu's stop words as it throws them and as its log says so, not the word alone.

    NPUException.h throws "NPU function error: " and the word (with one blank more when
    it supplies the word itself, as for FORCE STOP); NPUException.cpp logs
    "getRepoStopFlag in Run, throw WORD." first.
    """
    return (wording(f"throw {word}", word), wording(f"error: {word}", word),
            wording(f"error:  {word}", word))


DEVICE_TASK_ABORT = Rule(
    id="device-task-abort",
    severity=ERROR,
    quote="FORCE STOP",
    summary="the NPU aborted the tasks of a running job",
    meaning=(
        "The device's tasks were aborted under a running job (ACL_ERROR_RT_DEVICE_TASK_ABORT, "
        "107022): a fault elsewhere in the job or on the device made the runtime or a "
        "fault-recovery stop abort the device's work, and torch_npu reports it as FORCE STOP. "
        "Every later call on that device fails until the job is restarted."
    ),
    remedy=(
        "Read the lines before this one for the fault that caused the stop (a device memory "
        "error, a lost heartbeat, a failed peer); check `npu-smi info` health, then restart "
        "the job as a whole."
    ),
    patterns=(
        # torch_npu, NPUException.h (NPU_CHECK_ERROR_CHECK_UCE) in https://github.com/Ascend/pytorch:
        # for ACL_ERROR_RT_DEVICE_TASK_ABORT it throws "NPU function error: " " FORCE STOP"
        # ", error code is " 107022; NPUException.cpp (handleDeviceTaskAbort) logs
        # "getRepoStopFlag in Run, throw FORCE STOP." and returns "FORCE STOP".
        *_thrown("FORCE STOP"),
        # The same header's reason string, DEVICE_TASK_ABORT "reason=[device task abort]",
        # the form of the runtime's "desc=[...]" reasons.
        needle("[device task abort]"),
        # CANN runtime source (stream error handling): "stream is in device task abort
        # status, device_id=%u, stream_id=%d".
        needle("in device task abort status"),
    ),
)

DEVICE_MEMORY_FAULT = Rule(
    id="device-memory-fault",
    severity=ERROR,
    quote="HBM MULTI BIT ECC ERROR",
    summary="the NPU's own memory reported a hardware error",
    meaning=(
        "The device's memory (HBM) reported an uncorrectable error: a multi-bit ECC error "
        "(507054), an uncorrectable memory error that torch_npu calls UCE ERROR (507053), or a "
        "suspected memory error (507055). The job on it is stopped; a device that keeps "
        "reporting it is faulty, whatever the job or the suspend did."
    ),
    remedy=(
        "Check the device's health (`npu-smi info`) and its device logs; restart the job on a "
        "healthy device. If the device reports it again, reset it and have it serviced."
    ),
    patterns=(
        # torch_npu, NPUException.cpp in https://github.com/Ascend/pytorch: handleDeviceMemError
        # logs "getRepoStopFlag in Run, throw UCE ERROR." and returns "UCE ERROR" (thrown as
        # "NPU function error: UCE ERROR, error code is 507053"); handleHbmMultiBitEccError
        # returns "HBM MULTI BIT ECC ERROR." + the runtime's message; handleSuspectDeviceMemError
        # logs "getRepoStopFlag in Run, throw SUSPECT MEM ERROR.".
        *_thrown("UCE ERROR"),
        needle("HBM MULTI BIT ECC ERROR"),
        *_thrown("SUSPECT MEM ERROR"),
        # The CANN runtime's reasons (its rtErrMap_: "hbm Multi-bit ECC error", "suspect device
        # mem error"), which torch_npu's NPUException.h also matches ("reason=[device mem
        # error]", "reason=[hbm Multi-bit ECC error]", "reason=[suspect device mem error]").
        needle("hbm Multi-bit ECC error"),
        needle("device mem error"),
    ),
)
