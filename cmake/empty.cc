// Placeholder translation unit for a component library with no sources yet.
