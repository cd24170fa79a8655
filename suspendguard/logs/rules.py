"""The catalog of documented Ascend failures: every wording, old and new, in one place.

Each rule's patterns follow logs/matching.py (linear in the line's length).

Where a wording comes from is written next to it. "seed case N" is one of
the numbered failures of Ascend's AscendCL troubleshooting notes that the
project started from; case 4, the suspend refused while hwts is busy, is
why it exists (README.md).
The frameworks' own wordings (torch_npu, MindSpore, vLLM) and the device-abnormal
rules are in ``frameworks``; the ``Name(CODE): text`` form with a code the
reference lacks is ``named``'s rule, last.
"""

from __future__ import annotations

from suspendguard.logs import frameworks
from suspendguard.logs.matching import ERROR, WARNING, Rule, needle, wording
from suspendguard.logs.named import UNLISTED

RULES: tuple[Rule, ...] = (
    Rule(
        id="device-held-by-previous-job",
        severity=ERROR,
        quote="the last training process is running",
        summary="a previous job still held the NPU",
        meaning=(
            "A job could not start on the NPU because another process (usually the previous "
            "job, not yet exited or not yet cleaned up on the device) still held it: the HCCP "
            "process could not start, the device's NN process limit was reached, or another "
            "process occupied the device memory."
        ),
        remedy=(
            "Find and end the process still holding the device (`suspendguard status`, "
            "`npu-smi info`, `ps -ef | grep python`), wait about 10 s after it exits, then "
            "start the job again."
        ),
        patterns=(
            # torch_npu console, EJ0001 block: LlamaFactory issue 3839
            # (https://github.com/hiyouga/LlamaFactory/issues/3839) and verl PR 332
            # (https://github.com/verl-project/verl/pull/332): "EJ0001: ... Failed to
            # initialize the HCCP process. Reason: Maybe the last training process is running."
            needle("the last training process is running"),
            # CANN runtime source (PrintfTsdError, TSD_SUBPROCESS_NUM_EXCEED_THE_LIMIT):
            # "TsdOpen failed:The number of started NN processes exceeds the limit."; error
            # E30003 (issue 14); torch_npu fixed get_device_properties for it
            # (https://github.com/Ascend/pytorch, v2.x bugfix commits).
            needle("NN processes exceeds the limit"),
            # MindSpore runtime (ascend_memory_adapter.cc) and its docs, "CANN Common Error
            # Analysis" (https://gitee.com/mindspore/docs/blob/r2.6.0rc1/tutorials/source_en/
            # debug/error_analysis/cann_error_cases.md):
            # "Malloc device memory failed, size[32212254720], ret[207001], Device 6 may be
            # other processes occupying this card, check as: ps -ef|grep python".
            needle("may be other processes occupying this card"),
        ),
        vendor_ids=("AISW_PyTorch_Start_03", "AISW_MindSpore_Ascend_Backend_01",
                    "AISW_MindSpore_msrun_08"),
    ),
    Rule(
        id="hwts-busy-suspend",
        severity=ERROR,
        quote="hwts is busy",
        summary="AI processes were still running on the NPU",
        meaning=(
            "The suspend was refused by the NPU: its task scheduler (hwts, the task "
            "distribution module) was busy because an AI application had not exited."
        ),
        remedy=(
            "End AI processes gracefully with `kill -2 PID` (SIGINT) before suspending, "
            "and resume them only after wake-up. suspendguard does this before every suspend; "
            "this finding means a process was missed, ignored SIGINT, or the guard did not run."
        ),
        patterns=(
            # seed case 4; hiascend.com CANN 8.0.0 troubleshooting_0116 "The System
            # Fails to Be Suspended Because the AI Application Process Does Not Exit".
            needle("suspend pre check fail, hwts is busy"),
            # Same document, the companion EVENT line (with its function, as the
            # device prints it). ret=1 only: ret=0 is success.
            needle("process_low_power_cmd: ts suspend ack ret=1", regex=r"ts suspend ack ret=1(?![0-9])"),
        ),
    ),
    Rule(
        id="stream-unbind-running",
        severity=ERROR,
        quote="unbind model stream failed, stream is running",
        summary="an application freed device resources in its own crash handler",
        meaning=(
            "An application caught an abnormal-exit signal and released device resources "
            "in its handler while its model stream was still running; this breaks the "
            "driver's own cleanup and the next run fails."
        ),
        remedy=(
            "Remove the signal handler that frees device resources: when a process dies the "
            "host kernel driver releases its device resources by itself."
        ),
        patterns=(
            # seed case 3 (TSCH device log, old and new timestamps alike).
            # (The runtime's host-side "model stream unbind error" is left out on
            # purpose: nothing documents it with this cause, and every wording
            # costs the scanner time on every line.)
            needle("unbind model stream failed, stream is running"),
        ),
    ),
    Rule(
        id="aicore-exception",
        severity=ERROR,
        quote="aicore exception",
        summary="an operator failed on the NPU's AI Core",
        meaning=(
            "An operator (kernel) failed while running on the AI Core or vector core; every "
            "later call on that stream (event record, synchronize) then fails with the same "
            "reason. A fault of the job or the operator, not of the device's resources."
        ),
        remedy=(
            "Read the job's log around this line for the failing kernel; rerun with "
            "ASCEND_LAUNCH_BLOCKING=1 to find the operator, and report it with the CANN version."
        ),
        patterns=(
            # vllm-ascend issue 10122 (https://github.com/vllm-project/vllm-ascend/issues/10122):
            # "rtEventRecord execution failed, reason=aicore exception[FUNC:FuncErrorReason]";
            # issue 16683 (.../issues/16683): "rtEventQueryStatus:ErrCode=507015,
            # desc=[aicore exception], InnerCode=0x7150026"; hw-native-sys/PTOAS PR 770
            # (https://github.com/hw-native-sys/PTOAS/pull/770): "Kernel task happen error,
            # retCode=0x26, [aicore exception]."
            wording("aicore exception", "core exception"),
            # vllm-ascend issue 16234 (.../issues/16234): "rtEventRecord:ErrCode=507035,
            # desc=[vector core exception], InnerCode=0x715005e".
            wording("vector core exception", "core exception"),
            # MindSpore docs "CANN Common Error Analysis" (see device-held-by-previous-job):
            # "Aicore kernel execute failed, device_id=0, stream_id=14, ... fault kernel_name=".
            needle("Aicore kernel execute failed"),
        ),
        vendor_ids=("AISW_CANN_Runtime_032",),
    ),
    Rule(
        id="device-resources-not-released",
        severity=WARNING,
        quote="failed to release resources",
        summary="the device kept resources of a process that had exited",
        meaning=(
            "A process exited but the device could not release all its resources: tsdaemon "
            "could not force an AI CPU, queue or HCCP service process of it to exit, or the "
            "task scheduler timed out reclaiming its streams. Memory and IDs stay taken until "
            "they are recycled or the device is reset."
        ),
        remedy=(
            "Let jobs exit gracefully (SIGINT, not SIGKILL) and release streams before the "
            "device (aclrtDestroyStream, then aclrtResetDevice); if `npu-smi info` still shows "
            "memory in use with no process, reset the device or reboot."
        ),
        patterns=(
            # tsdaemon EVENT lines, Ascend/mind-cluster test log
            # (https://github.com/Ascend/mind-cluster/blob/master/component/ascend-faultdiag/
            # test/st_module_testcase/kg_parse/device-os_20231031164139951.log):
            # "[TsdEVENT] Event id=0x8c17a005." The knowledge base names the siblings:
            # 0x8C17A005 aicpu_scheduler, 0x8C19A005 queue_scheduler, 0x8C1DA005
            # aicpu_cust_sd ("failed to release common resources"), 0x8C1FA006 hccp ("key
            # resources"). The knowledge base also lists "event_id=0x..." forms; they are left
            # out until seen in a real log (each anchor costs the scanner time on every line).
            wording("Event id=0x8c17a005", "Event id=0x8c1"),
            wording("Event id=0x8c19a005", "Event id=0x8c1"),
            wording("Event id=0x8c1da005", "Event id=0x8c1"),
            wording("Event id=0x8c1fa006", "Event id=0x8c1"),
            # Host trs driver (trs_fops.c, trs_warn "Recycle warn. (devid=%u; tsid=%u; name=%s;
            # pid=%d; task_id=%lld; ret=%d)" from _trs_release_by_exit_stage); the knowledge
            # base's AISW_CANN_DRV_TS_030 "Resource leak" requires both words.
            needle("_trs_release_by_exit_stage", "Recycle warn"),
        ),
        vendor_ids=("0x8C17A005", "0x8C19A005", "0x8C1DA005", "0x8C1FA006",
                    "AISW_CANN_DRV_TS_030"),
    ),
    Rule(
        id="event-id-exhausted",
        severity=ERROR,
        quote="event id alloc error",
        summary="the application ran out of NPU event IDs",
        meaning=(
            "aclrtRecordEvent (or event creation) failed because the device's event IDs are "
            "used up (1,023 per device on Atlas inference products, 65,535 or more on training "
            "products): events are recorded and never reset or destroyed."
        ),
        remedy=(
            "Call aclrtResetEvent once an event recorded with aclrtRecordEvent (and waited on "
            "with aclrtStreamWaitEvent) has completed; pair every aclrtCreateEvent with "
            "aclrtDestroyEvent, especially in loops."
        ),
        patterns=(
            # seed case 2, driver side: "[devdrv] [drvEventIdAlloc 647] error."
            wording("[drvEventIdAlloc ", "EventIdAlloc", "] error"),
            # seed case 2, runtime side, old form and masked form alike.
            wording("drvEventIdAlloc", "EventIdAlloc", regex=r"errorcode ?= ?7(?![0-9])"),
            wording("EventIdAlloc:id = -1", "EventIdAlloc"),
            # The same failure as newer runtimes word it.
            wording("Event id alloc error", "vent id alloc error"),
            wording("event id alloc error", "vent id alloc error"),
            # CANN runtime error table: RT_ERROR_DRV_NO_EVENT_RESOURCES ->
            # ACL_ERROR_RT_NO_EVENT_RESOURCE (207007), "driver error:no event resource";
            # plog prints "ErrCode=207007, desc=[driver error:no event resource]".
            wording("no event resource", " resource"),
            # CANN troubleshooting "EE1023 resource shortage" (Event section): plog lines
            # "GenEventId:Alloc Event resource failed. ... ErrorCode=EE1023." and
            # "Failed to allocate event id, device_id=0, tsId=0, retCode=0x7020019."
            # (retCode=0x7020019 itself, and ErrCode=207007, name this rule through the code
            # table, data/vendor-codes.toml.)
            wording("Alloc Event resource failed", " resource"),
            wording("Failed to allocate event id", "Failed to alloc"),
            # (No catch-all "rtEventRecord ... fail": that call also fails for AI Core
            # exceptions, "rtEventRecord execution failed, reason=aicore exception";
            # see aicore-exception.)
        ),
        vendor_ids=("AISW_CANN_Runtime_016", "AISW_CANN_DRV_TS_006"),
    ),
    Rule(
        id="stream-exhausted",
        severity=ERROR,
        quote="alloc stream resource failed",
        summary="the application ran out of NPU streams",
        meaning=(
            "Creating a stream failed: the device's streams (shared by every process on it) "
            "are used up, usually by streams created and never destroyed, or by too many "
            "ACL graphs running at once."
        ),
        remedy=(
            "Pair every aclrtCreateStream with aclrtDestroyStream and destroy idle streams; "
            "run fewer ACL graphs concurrently; check `npu-smi info` for other processes."
        ),
        patterns=(
            # CANN troubleshooting "EE1023 resource shortage" (Stream section): retCode
            # 0x7020023 with "Alloc Stream resource failed", "resource alloc fail" or
            # "Failed to alloc stream id". (The code itself, also printed in decimal as
            # 117571619 (issue 14), and ErrCode=207008 name this rule through the code table.)
            wording("Alloc Stream resource failed", " resource"),
            wording("Failed to alloc stream id", "Failed to alloc"),
            # CANN runtime error table: ACL_ERROR_RT_NO_STREAM_RESOURCE; also printed when
            # the async-copy queue of an ACL graph is full (retCode 0x7110019).
            wording("no stream resource", " resource"),
            *frameworks.STREAMS,
        ),
        vendor_ids=("AISW_CANN_Runtime_015", "AISW_CANN_DRV_TS_001"),
    ),
    Rule(
        id="notify-exhausted",
        severity=ERROR,
        quote="no notify resource",
        summary="the application ran out of NPU notify objects",
        meaning=(
            "Creating a notify object failed: the device's notifies are used up, usually by "
            "notifies or finished ACL graphs that were never destroyed."
        ),
        remedy=(
            "Pair aclrtCreateNotify with aclrtDestroyNotify; destroy finished ACL graphs with "
            "aclmdlRIDestroy; run fewer ACL graphs concurrently."
        ),
        patterns=(
            # CANN troubleshooting "EE1023 resource shortage" (Notify section); its retCode
            # 0x702001b, and ErrCode=207009, name this rule through the code table.
            wording("Alloc Notify resource failed", " resource"),
            # CANN runtime error table: ACL_ERROR_RT_NO_NOTIFY_RESOURCE.
            wording("no notify resource", " resource"),
        ),
    ),
    Rule(
        id="device-oom",
        severity=ERROR,
        quote="out of memory",
        summary="the NPU ran out of device memory",
        meaning=(
            "A device memory allocation failed. When memory use grows run after run, an "
            "application allocates without releasing."
        ),
        remedy=(
            "Pair every allocation with its release (aclrtMalloc/aclrtFree, "
            "aclrtMallocHost/aclrtFreeHost, aclrtCreateStream/aclrtDestroyStream) and release "
            "in order: streams first (aclrtDestroyStream), then the device (aclrtResetDevice). "
            "Close applications that are not in use. For a framework's job (torch_npu, "
            "MindSpore, vLLM), check `npu-smi info` for memory another process still holds, "
            "then fit the job to what is free (batch size, model length, vLLM's "
            "--gpu-memory-utilization)."
        ),
        patterns=(
            # RecentErrMsg blocks, e.g. hw-native-sys/PTOAS PR 341 (CANN 8.x):
            # "Memory_Allocation_Failure(EL0004): Failed to allocate memory." followed by
            # "allocate device memory failed.[FUNC:Init][FILE:memory_pool_manager.cc]".
            # (EL0004 itself, and 207001/207018, name this rule through the vendor code
            # table, data/vendor-codes.toml: no wording needed for them.)
            needle("allocate device memory failed"),
            # torch_npu's message (vllm-ascend issue 19, vllm-omni issues 1199, 2128).
            wording("NPU out of memory", "out of memory"),
            # CANN runtime error table: RT_ERROR_DRV_OUT_MEMORY -> "driver error:out of memory".
            wording("driver error:out of memory", "out of memory"),
            # The driver's own line, hiascend.com CANN troubleshooting_0118 ("内存申请失败,
            # 出现OOM"): "[drv][devmm][devmm_alloc_managed 182]<errno:12, 6>
            # Heap_alloc_managed out of memory." (next to "module_name=EL9999").
            wording("Heap_alloc_managed out of memory", "out of memory"),
            # (ACL_ERROR_RT_MEMORY_ALLOCATION as AscendCL reports it, "alloc device memory
            # failed, runtime result = 207001" (issue 14), is named by the code table.
            # MindSpore's "ret[207001] ... may be other processes occupying this card" is
            # device-held-by-previous-job: a wording names a line before its code does.)
            *frameworks.OOM,
        ),
        vendor_ids=("AISW_Framework_Custom_01",),
    ),
    Rule(
        id="device-busy",
        severity=WARNING,
        quote="resources are busy",
        summary="the NPU could not be opened because it was busy",
        meaning=(
            "An application could not open or set the device: it was occupied by another "
            "process, being reset, or its software was not ready (for example right after "
            "a resume)."
        ),
        remedy=(
            "Check `npu-smi info` and `suspendguard status` for processes still holding the "
            "device; after a resume wait until the device is ready, then start the application "
            "again."
        ),
        patterns=(
            # Brief's field case; CANN runtime source prints
            # "[drv api] halDeviceOpen failed. device_id=%u, drvRetCode=%d." and, newer,
            # "Call driver api halDeviceOpen failed, drvRetCode=%d, drvDevId=%u.".
            # 7 is DRV_ERROR_INNER_ERR and 13 DRV_ERROR_BUSY in ascend_hal_error.h; the
            # field case reports 7 next to Resource_Busy, so both count.
            needle("halDeviceOpen failed", regex=r"drvRetCode=(?:7|13)(?![0-9])"),
            # (CANN's "Resource_Busy(EL0005): The resources are busy. Possible Cause: 1.
            # occupied 2. device is being reset 3. software is not ready", and Ascend/samples
            # issue 16's "acl set device 0 failed, errorCode = 507033", are named by their
            # codes, EL0005 and 507033 (ACL_ERROR_RT_DEV_SETUP_ERROR), in the code table;
            # so are DCMI's -8012 (not ready) and -8020 (resource occupied).)
        ),
    ),
    frameworks.DEVICE_MEMORY_FAULT,
    Rule(
        id="heartbeat-lost",
        severity=ERROR,
        quote="lost heartbeat",
        summary="the NPU stopped answering the host",
        meaning=(
            "The host lost the device's heartbeat: the device hung or reset. Huawei's fault "
            "knowledge base titles this \"Device heartbeat lost/system suspended\": after a "
            "resume it is a consequence of the suspend, not a random fault."
        ),
        remedy=(
            "Check `npu-smi info` health and the device logs (device-os, device-N) around that "
            "time; a device that does not come back needs a reset or a reboot."
        ),
        patterns=(
            # Brief: "Device[N] lost heartbeat"; vllm-ascend issue 8186
            # (https://github.com/vllm-project/vllm-ascend/issues/8186):
            # "Device[1] lost heartbeat.[FUNC:SyncTask][FILE:direct_hwts_engine.cc]".
            needle("lost heartbe", regex=r"Device\[[0-9]{1,6}\] lost heartbeat"),
            # Same thread: "rtDeviceSynchronizeWithTimeout execution failed, reason=lost
            # heartbeat[FUNC:FuncErrorReason]".
            wording("reason=lost heartbeat", "lost heartbe"),
            # MindCluster knowledge base AISW_CANN_Runtime_055 "Device heartbeat
            # lost/system suspended" identifies it by "Device lost heartbeat" (and the
            # misspelt "Device lost heartbeart" it also lists).
            wording("Device lost heartbeat", "lost heartbe"),
            wording("Device lost heartbeart", "lost heartbe"),
            # Issue 14: "The task scheduler loses the heartbeat."
            needle("The task scheduler loses the heartbeat"),
        ),
        vendor_ids=("AISW_CANN_Runtime_055",),
    ),
    frameworks.DEVICE_TASK_ABORT,
    Rule(
        id="hccl-peer-lost",
        severity=WARNING,
        quote="Heartbeat Lost Occurred",
        summary="a peer rank of a collective job stopped answering",
        meaning=(
            "HCCL lost the heartbeat of another rank of the same job (no heartbeat for 30 s): "
            "that process exited or the network broke. Expected when a job was stopped "
            "for a suspend on one host only."
        ),
        remedy=(
            "Stop every rank of a multi-device job before suspending any host it runs on, and "
            "restart the job as a whole after resume."
        ),
        patterns=(
            # hiascend.com HCCL user guide (hcclug_000055) and torch_npu docs
            # troubleshooting/HCCL_timeout.md: "ExceptionType:[Heartbeat Lost Occurred]".
            needle("Heartbeat Lost Occurred"),
        ),
    ),
    UNLISTED,
)

BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
