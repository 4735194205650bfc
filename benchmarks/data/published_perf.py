"""Published TensorRT-LLM / NIM performance figures: the fitting set and the validation set of the performance model.

Every figure below was read from the cited source (numbers as published; None where the source's cell is empty).
Layout follows each source's table: one tuple per (model, GPU, TP, precision) with one value per input/output
length pair of that source, in the source's order.

FIT: TensorRT-LLM's own perf-overview tables at the pinned commit (the only rows the efficiency constants are
fitted on). VALIDATION: everything else, never used to fit: the same doc at an older commit (v0.17 throughput
table and v0.14 online-serving table: other TensorRT-LLM versions, other GPUs (L40S, A100), other models (Mistral,
Mixtral), TP1-8) and NVIDIA's NIM benchmarking page.
"""

from __future__ import annotations

TRTLLM_REPO = "NVIDIA/TensorRT-LLM"
PERF_DOC = "docs/source/performance/perf-overview.md"
FIT_COMMIT = "00f37686aa854010d68bcbd0f4ab000221541ca6"  # PyTorch backend, trtllm-bench throughput, v1.0 era
OLD_COMMIT = "258c7540c03517def55d9a5aadfa9288af474e1b"  # "All data ... generated using version 0.17"
FIT_SOURCE = f"{TRTLLM_REPO}/{PERF_DOC}@{FIT_COMMIT}"
OLD_SOURCE = f"{TRTLLM_REPO}/{PERF_DOC}@{OLD_COMMIT}"
NIM_SOURCE = "https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.md (Llama-3.3-70b-instruct, NIM 1.8.0)"

# ---- fitting set: Total Output Throughput (tokens/s), offline, requests at an infinite rate ----

FIT_LENGTHS = ((128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (1000, 2000), (2048, 128),
               (2048, 2048), (5000, 500), (20000, 2000))
# (preset, GPU product, TP, precision, throughputs in FIT_LENGTHS order)
FIT_THROUGHPUT = (
    ("llama-3.1-8b", "NVIDIA-H200", 1, "fp8", (27911, 26221, 18027, 20770, 17744, 16828, 3538, 12194, 3902, 1804)),
    ("llama-3.1-8b", "NVIDIA-H100-80GB-HBM3", 1, "fp8",
     (28312, 22714, 14325, 17660, 15220, 13899, 3450, 9305, 3459, 1351)),
    ("llama-3.3-70b", "NVIDIA-B200", 1, "fp4", (11147, 9922, 6831, 7762, 7007, 6271, 1339, 4783, 1459, 665)),
    ("llama-3.3-70b", "NVIDIA-GB200", 1, "fp4", (12189, 11309, 7849, 9028, 7326, 6513, 1450, 5646, 1602, 755)),
    ("llama-3.3-70b", "NVIDIA-H200", 1, "fp8", (3803, 4336, 2872, 3666, 2909, 2994, 442, 2003, 566, 283)),
    ("llama-3.3-70b", "NVIDIA-H100-80GB-HBM3", 2, "fp8", (6378, 6651, 4199, 5222, 4205, 4146, 762, 3082, 898, 437)),
    ("llama-3.1-405b", "NVIDIA-B200", 4, "fp4", (6281, 8020, 6345, 6244, 5209, 4933, 749, 4212, 1048, 672)),
    ("llama-3.1-405b", "NVIDIA-GB200", 4, "fp4", (6740, 8151, 6608, 6540, 5389, 5135, 797, 4407, 1112, 739)),
    ("llama-3.1-405b", "NVIDIA-H200", 8, "fp8", (3814, 5348, 4741, 4724, 3330, 3722, 456, 2948, 650, 505)),
    ("llama-3.1-405b", "NVIDIA-H100-80GB-HBM3", 8, "fp8", (3627, 4340, 3116, 3994, 2919, 2895, 453, 2296, 610, 345)),
)
# Same doc and commit, MoE rows run with attention data parallelism (enable_attention_dp, --ep): the model has
# no attention DP, so these are printed as outside the model, neither fitted nor validated.
FIT_OUTSIDE_MODEL = (
    ("qwen3-235b-a22b", "NVIDIA-H200", 8, "fp8",
     (30429, 42821, 26852, 28026, 23789, 22061, 3331, 16672, 3623, 1876)),
    ("qwen3-235b-a22b", "NVIDIA-H100-80GB-HBM3", 8, "fp8",
     (None, 19658, 12447, 18351, 14898, 15136, None, 9924, 3225, None)),
    ("llama-4-scout-17b-16e", "NVIDIA-H200", 4, "fp8",
     (30354, 34316, 21332, 24630, 21636, 18499, 3699, 14949, 4605, 2105)),
    ("llama-4-scout-17b-16e", "NVIDIA-H100-80GB-HBM3", 4, "fp8",
     (None, 15130, 8603, 12399, 12129, 9838, 3253, 7972, 3342, None)),
)

# ---- validation set 1: the same doc at OLD_COMMIT, TensorRT-LLM 0.17 (engine flow), Token Throughput ----

OLD_LENGTHS = ((128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (2048, 128), (2048, 2048),
               (5000, 500), (20000, 2000))
H200, H100, L40S, A100 = "NVIDIA-H200", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "NVIDIA-A100-SXM4-80GB"
# The table's GH200 column is left out (GH200 is not in the product table). A100 rows are FP16, others FP8.
OLD_THROUGHPUT = (
    ("llama-3.1-8b", H200, 1, "fp8", (29526.04, 25398.86, 17370.8, 21020.81, 17537.96, 3794.14, 11968.5, 3987.79, 1804.1)),
    ("llama-3.1-8b", H100, 1, "fp8", (28836.77, 21109.38, 13593.65, 16500.69, 15244.78, 3556.73, 9488.42, 3559.36, 1401.31)),
    ("llama-3.1-8b", L40S, 1, "fp8", (9104.61, 5365.81, 3025.92, 4273.75, 4054.71, 1066.52, 2225.27, 981.2, 327.97)),
    ("llama-3.1-8b", A100, 1, "fp16", (6627.27, 5255.99, 3453.79, 4276.58, 3786.83, 799.61, 2424.16, 825.13, 330.04)),
    ("llama-3.1-70b", H200, 1, "fp8", (4020.75, 4165.68, 2651.75, 3018.39, 2823.45, 465.99, 1913.8, 560.16, 279.52)),
    ("llama-3.1-70b", H100, 1, "fp8", (3378.03, 911.62, 426.32, 775.57, 839.97, 343.29, None, 245.34, None)),
    ("llama-3.1-70b", H200, 2, "fp8", (6823.01, 8290.35, 6526.67, 6848.02, 5164.76, 809, 4183.88, 1025.38, 640.62)),
    ("llama-3.1-70b", H100, 2, "fp8", (6645.12, 6169.58, 3897.06, 4972.57, 4390.53, 772.66, 2898.16, 919.73, 443.01)),
    ("llama-3.1-70b", A100, 2, "fp16", (1313.96, 531.26, None, 439.41, 472.94, 148.96, 261.1, 121.47, None)),
    ("llama-3.1-70b", H200, 4, "fp8", (11098.63, 14156, 10574.06, 12452.79, 8911.29, 1358.06, 7130.44, 1811.55, 1199.68)),
    ("llama-3.1-70b", H100, 4, "fp8", (11127.53, 11511.93, 7439.41, 9836.7, 7430.99, 1302.6, 5480.03, 1602.78, 920.19)),
    ("llama-3.1-70b", L40S, 4, "fp8", (1523.52, 1942.66, 1440.23, 1634.72, 1209.25, 177.72, 969.68, 249.52, 162.25)),
    ("llama-3.1-70b", A100, 4, "fp16", (2733.48, 2811.27, 1976.49, 2275.79, 1921.77, 325.15, 1393.64, 392.62, 212.08)),
    ("llama-3.1-70b", H200, 8, "fp8", (15355.84, 21195.88, 16941.52, 17278.4, 13181.24, 1983.03, 11142.47, 2717.83, 1920.45)),
    ("llama-3.1-70b", H100, 8, "fp8", (14730.69, 17061.82, 14171.43, 14679.33, 11451.16, 1923.41, 8801.95, 2457.42, 1512.6)),
    ("llama-3.1-70b", L40S, 8, "fp8", (1464.03, 2303.31, 2018.22, 1971.96, 1333.62, 176.16, 1200.16, 259.71, 209.87)),
    ("llama-3.1-70b", A100, 8, "fp16", (4717.62, 5241.5, 3724.67, 4445.37, 3320.41, 542.38, 2553.71, 696.34, 413.38)),
    ("llama-3.1-405b", H200, 8, "fp8", (3874.19, 5938.09, 5168.37, 5084.29, 3399.69, 463.42, 2940.62, 669.13, 535.31)),
    ("mistral-7b", H200, 1, "fp8", (31938.12, 27409.3, 18505.03, 22354.67, 18426.16, 3834.43, 12347.37, 4041.59, 1822.69)),
    ("mistral-7b", H100, 1, "fp8", (31674.49, 23496.42, 14350.99, 18026.27, 16035.66, 3642.48, 9958.17, 3591.33, 1373.24)),
    ("mistral-7b", L40S, 1, "fp8", (9664.13, 5720.65, 3136.33, 4521.77, 4177.76, 1076.74, 2286.71, 1001.02, 337.83)),
    ("mistral-7b", A100, 1, "fp16", (6982.53, 5630.62, 3591.22, 4400.48, 3896.58, 808.58, 2489.77, 844.64, 332.3)),
    ("mixtral-8x7b", H200, 1, "fp8", (17157.72, 15095.21, 9534.62, 12105.27, 10371.36, 2009.67, 6940.32, 2309.1, 1151.78)),
    ("mixtral-8x7b", H100, 1, "fp8", (15962.49, 8290.13, 4784.86, 6800.6, 6868.52, 1892.81, 3983.1, 1764.7, 673.7)),
    ("mixtral-8x7b", H200, 2, "fp8", (27825.34, 29584.05, 21564.68, 23410.63, 19151.19, 3383.16, 14007.29, 4223.68, 2299.21)),
    ("mixtral-8x7b", H100, 2, "fp8", (27451.13, 22830.08, 14237.01, 17036.04, 15770.89, 3333.68, 10685.85, 3646.09, 1757.45)),
    ("mixtral-8x7b", A100, 2, "fp16", (5541.47, 4169.78, 2608.05, 3446.37, 3154.52, 649, 2056.58, 724.44, 337.51)),
    ("mixtral-8x7b", H200, 4, "fp8", (42551.59, 52291.78, 39513.73, 43818.99, 33580.9, 5467.62, 24980.93, 7084.94, 4236.84)),
    ("mixtral-8x7b", H100, 4, "fp8", (41068.23, 41164.73, 27912.48, 34489.34, 27784.74, 5234.98, 19432.08, 6401.56, 3303.83)),
    ("mixtral-8x7b", L40S, 4, "fp8", (6921.87, 7996.93, 5736.09, 6914.68, 5251.49, 827.62, 3935.32, 1092.88, 682.48)),
    ("mixtral-8x7b", A100, 4, "fp16", (10324.28, 10911.86, 7666.51, 8456.21, 7122.84, 1237.62, 5222.98, 1500.55, 829.59)),
    ("mixtral-8x7b", H200, 8, "fp8", (53212.55, 68608.45, 54827.78, 58706.39, 44705.48, 7554.38, 36193.64, 10271.8, 6835.53)),
    ("mixtral-8x7b", H100, 8, "fp8", (50849.55, 61607.7, 48280.37, 52583.65, 40631.71, 6988.18, 30983.35, 9210.11, 5602.43)),
    ("mixtral-8x7b", L40S, 8, "fp8", (6740.84, 10393.3, 8472.35, 8660.71, 5947.72, 811.96, 5136.98, 1153.76, 918.95)),
    ("mixtral-8x7b", A100, 8, "fp16", (17043.54, 20277.88, 15282.89, 17184.24, 12851.44, 2165.52, 9809.76, 2761.28, 1592.53)),
)

# ---- validation set 2: the same doc at OLD_COMMIT, "Online Serving Measurements" (v0.14, BF16, Triton
# tensorrtllm_backend, 500 requests at a fixed QPS): mean TTFT and mean ITL (ms) ----
# (preset, GPU, TP, input, output, QPS, achieved requests/s, mean TTFT ms, mean ITL ms). Rows where the server
# fell behind the offered rate (achieved < QPS - 1; the table rounds requests/s) and QPS = INF are left out:
# their TTFT is the wait of a growing queue over a 500-request run, not a steady state.
H200_131 = "NVIDIA-H200"  # the table says "H200 131GB HBM3"
ONLINE = (
    ("llama-3.1-70b", H100, 4, 467, 256, 2, 2, 62, 21),
    ("llama-3.1-70b", H100, 4, 467, 256, 4, 4, 68, 24),
    ("llama-3.1-70b", H100, 4, 467, 256, 8, 7, 92, 32),
    ("llama-3.1-70b", H100, 4, 467, 16, 2, 2, 53, 18),
    ("llama-3.1-70b", H100, 4, 467, 16, 4, 4, 58, 20),
    ("llama-3.1-70b", H100, 4, 467, 16, 8, 8, 71, 24),
    ("llama-3.1-70b", H100, 4, 467, 16, 16, 16, 109, 38),
    ("llama-3.1-70b", H100, 4, 202, 214, 2, 2, 48, 20),
    ("llama-3.1-70b", H100, 4, 202, 214, 4, 4, 51, 22),
    ("llama-3.1-70b", H100, 4, 202, 214, 8, 7, 57, 25),
    ("llama-3.1-8b", H100, 1, 467, 256, 2, 2, 23, 8),
    ("llama-3.1-8b", H100, 1, 467, 256, 4, 4, 24, 9),
    ("llama-3.1-8b", H100, 1, 467, 256, 8, 8, 26, 9),
    ("llama-3.1-8b", H100, 1, 467, 256, 16, 15, 30, 11),
    ("llama-3.1-8b", H100, 1, 467, 16, 2, 2, 19, 7),
    ("llama-3.1-8b", H100, 1, 467, 16, 4, 4, 20, 7),
    ("llama-3.1-8b", H100, 1, 467, 16, 8, 8, 22, 7),
    ("llama-3.1-8b", H100, 1, 467, 16, 16, 16, 24, 8),
    ("llama-3.1-8b", H100, 1, 467, 16, 32, 31, 29, 10),
    ("llama-3.1-8b", H100, 1, 202, 214, 2, 2, 19, 7),
    ("llama-3.1-8b", H100, 1, 202, 214, 4, 4, 20, 8),
    ("llama-3.1-8b", H100, 1, 202, 214, 8, 7, 21, 9),
    ("llama-3.1-70b", H200_131, 4, 467, 256, 2, 2, 58, 18),
    ("llama-3.1-70b", H200_131, 4, 467, 256, 4, 4, 63, 20),
    ("llama-3.1-70b", H200_131, 4, 467, 256, 8, 7, 84, 27),
    ("llama-3.1-70b", H200_131, 4, 467, 16, 2, 2, 50, 15),
    ("llama-3.1-70b", H200_131, 4, 467, 16, 4, 4, 55, 16),
    ("llama-3.1-70b", H200_131, 4, 467, 16, 8, 8, 67, 20),
    ("llama-3.1-70b", H200_131, 4, 467, 16, 16, 16, 103, 33),
    ("llama-3.1-70b", H200_131, 4, 202, 214, 2, 2, 43, 17),
    ("llama-3.1-70b", H200_131, 4, 202, 214, 4, 4, 46, 18),
    ("llama-3.1-70b", H200_131, 4, 202, 214, 8, 7, 51, 21),
    ("llama-3.1-8b", H200_131, 1, 467, 256, 2, 2, 21, 6),
    ("llama-3.1-8b", H200_131, 1, 467, 256, 4, 4, 23, 7),
    ("llama-3.1-8b", H200_131, 1, 467, 256, 8, 8, 24, 7),
    ("llama-3.1-8b", H200_131, 1, 467, 256, 16, 15, 27, 9),
    ("llama-3.1-8b", H200_131, 1, 467, 16, 2, 2, 18, 5),
    ("llama-3.1-8b", H200_131, 1, 467, 16, 4, 4, 19, 6),
    ("llama-3.1-8b", H200_131, 1, 467, 16, 8, 8, 20, 6),
    ("llama-3.1-8b", H200_131, 1, 467, 16, 16, 16, 22, 7),
    ("llama-3.1-8b", H200_131, 1, 467, 16, 32, 31, 27, 9),
    ("llama-3.1-8b", H200_131, 1, 202, 214, 2, 2, 17, 6),
    ("llama-3.1-8b", H200_131, 1, 202, 214, 4, 4, 18, 6),
    ("llama-3.1-8b", H200_131, 1, 202, 214, 8, 7, 19, 7),
    ("llama-3.1-8b", H200_131, 1, 202, 214, 16, 14, 20, 8),
)

# ---- validation set 3: NIM 1.8.0, Llama-3.3-70B-Instruct, 2 x H100 80G, fp8 TP2 (NIM_SOURCE) ----
# (input, output, concurrency, TTFT ms, ITL ms, throughput tokens/s). Concurrency 100-250 left out: throughput
# is flat there (~920 tokens/s) and TTFT is the wait for an engine slot, whose limit the page does not give.
NIM_70B_H100_TP2_FP8 = (
    (5000, 500, 1, 406.77, 18.58, 51.67),
    (5000, 500, 5, 546.7, 21.83, 218.48),
    (5000, 500, 25, 688.69, 38.75, 623.4),
    (5000, 500, 50, 834.51, 59.73, 814.37),
    (500, 2000, 1, 47.77, 18.91, 52.85),
)

# ---- attention data parallelism: TensorRT-LLM's DeepSeek-R1 guide, max-throughput runs (not fitted) ----
# Both ran `trtllm-bench --tp 8 --ep 8` with enable_attention_dp: true; max_batch_size is per rank; KV cache in the
# checkpoint's 16-bit dtype (the fp8 KV rerun of the B200 row is a different checkpoint, R1-0528).
DEEPSEEK_GUIDE_COMMIT = "01c4ece911eb569e72cf4177f83238a0520641c2"
DEEPSEEK_GUIDE_SOURCE = (f"{TRTLLM_REPO}/docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md"
                         f"@{DEEPSEEK_GUIDE_COMMIT}")
# (GPU, quantization, KV dtype, TP = EP, max_batch_size per rank, max_num_tokens, KV fraction, concurrency, input,
#  output, Total Output Throughput tokens/s)
DEEPSEEK_GUIDE_ADP = (
    ("NVIDIA-H200", "fp8", "bf16", 8, 128, 1151, 0.8, 1024, 1024, 2048, 11489.2671),
    ("NVIDIA-B200", "nvfp4", "bf16", 8, 384, 1536, 0.85, 3072, 1024, 2048, 36384.0838),
)
