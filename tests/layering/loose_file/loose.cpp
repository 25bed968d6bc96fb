// A planted file in no layer's folder, for core_layering_refuses_a_loose_file.
